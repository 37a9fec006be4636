"""The scenarios and applications that ship inside the package, and how a scenario is named.

Wherever a scenario is accepted (``sremarathon run --scenario``, ``--marathon-scenario``, the
``marathon_scenario`` ini key and marker) it is either a path to a scenario ``.yaml`` file or the
name of a built-in one::

    default   pytest_sremarathon/scenarios/default.yaml   the 12-hour marathon
    smoke     pytest_sremarathon/scenarios/smoke.yaml     2 hours, ~10 faults: fast iteration, PR gates

A value is a name when it has neither a ``/`` nor a ``.`` (``smoke``), a path otherwise
(``ci/marathon.yaml``, ``./smoke``). The applications the built-in scenarios run (code,
manifests, configuration, unit tests, curated changes) are in :data:`APPS_DIR`; a scenario file
of your own refers to them with ``apps_dir`` (``sremarathon init`` writes one).

Light on purpose (no pydantic, no yaml at import): the pytest plugin's entry point uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

#: Where the built-in scenarios are (inside the installed package).
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
#: The built-in applications (``<app>/app.yaml``, ``services/``, ``manifests/``, ``config/``,
#: ``tests/``, ``changes/``).
APPS_DIR = SCENARIOS_DIR / "apps"
#: The built-in scenario used when none is named.
DEFAULT_NAME = "default"
#: A project's own marathon, used instead of the built-in default when it exists (relative to
#: the current directory for the command line, to the rootdir for pytest).
PROJECT_SCENARIO = Path("scenarios") / "marathon.yaml"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


class UnknownScenario(ValueError):
    """A scenario name that is not a built-in one (the message lists the names)."""


@dataclass(frozen=True)
class BuiltinScenario:
    name: str
    path: Path

    def facts(self) -> str:
        """Length, faults, apps and cadence, e.g. ``2h, 10 faults over shop, social, hotel, agent every 5m``."""
        import yaml

        data = yaml.safe_load(self.path.read_text()) or {}
        faults = (data.get("schedule") or {}).get("faults", "?")
        apps = ", ".join(data.get("apps") or [])
        return f"{data.get('duration', '?')}, {faults} faults over {apps}, agent every {data.get('cadence', '?')}"

    def summary(self) -> str:
        """One line: the facts and the file's own description."""
        import yaml

        description = (yaml.safe_load(self.path.read_text()) or {}).get("description", "")
        return f"{self.facts()}: {description}" if description else self.facts()


def builtin_scenarios() -> dict[str, BuiltinScenario]:
    """The built-in scenarios by name (``default`` first)."""
    found = {p.stem: BuiltinScenario(p.stem, p) for p in sorted(SCENARIOS_DIR.glob("*.yaml"))}
    return dict(sorted(found.items(), key=lambda kv: (kv[0] != DEFAULT_NAME, kv[0])))


def is_name(value: str) -> bool:
    """Does ``value`` name a scenario (rather than give a path)?"""
    return bool(_NAME.match(value)) and "." not in value


def names_line() -> str:
    return ", ".join(builtin_scenarios())


def builtin_path(name: str) -> Path:
    """The file of built-in scenario ``name``; :class:`UnknownScenario` names the available ones."""
    found = builtin_scenarios().get(name)
    if found is None:
        raise UnknownScenario(f"no built-in scenario {name!r}; available: {names_line()} "
                              f"(`sremarathon scenarios` describes them)")
    return found.path


def resolve(value: str | Path, base: Path) -> Path:
    """A scenario given by name or path: a built-in's file, or ``value`` relative to ``base``."""
    text = str(value)
    if not isinstance(value, Path) and is_name(text):
        try:
            return builtin_path(text)
        except UnknownScenario as exc:
            raise UnknownScenario(f"{exc}, or give the path of a scenario .yaml file") from None
    return (base / Path(text).expanduser()).resolve()


def builtin_name(path: Path) -> Optional[str]:
    """The name of the built-in scenario at ``path``, if it is one."""
    try:
        resolved = path.resolve()
    except OSError:
        return None
    for name, found in builtin_scenarios().items():
        if found.path == resolved:
            return name
    return None


def default_scenario(base: Path) -> Path:
    """Without a named scenario: ``<base>/scenarios/marathon.yaml`` when the project has one,
    else the built-in ``default``."""
    own = base / PROJECT_SCENARIO
    return own.resolve() if own.is_file() else builtin_path(DEFAULT_NAME)


def describe(path: Path) -> str:
    """How a scenario is shown to a user: ``built-in "smoke"`` or its path."""
    name = builtin_name(path)
    return f'built-in scenario "{name}"' if name else f"scenario {path}"
