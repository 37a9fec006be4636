"""Hook specifications (pluggy). Implement them in a ``conftest.py`` or a plugin with
``@pytest.hookimpl``; outside pytest (``sremarathon run``) plugins registered under the
``sremarathon`` entry-point group are loaded into the same hooks.

The marker's project is ``pytest`` so one ``@pytest.hookimpl`` serves both worlds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import pluggy

if TYPE_CHECKING:
    from .agent.protocol import ObservationWire
    from .bundle import Bundle
    from .faults.base import FaultKind
    from .marathon import Marathon
    from .scoring import MarathonScore

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def sremarathon_fault_kinds() -> "list[type[FaultKind]]":
    """Return fault kinds (subclasses of :class:`pytest_sremarathon.faults.FaultKind`) to add
    to the registry; scenarios can then schedule them by ``name``."""


@hookspec
def sremarathon_backends() -> "dict[str, Callable[..., Any]]":
    """Return ``{name: factory}`` for additional cluster backends (``--marathon-backend``)."""


@hookspec
def sremarathon_adjust_observation(observation: "ObservationWire", marathon: "Marathon") -> None:
    """Change the observation in place before the agent sees it (e.g. drop alert kinds)."""


@hookspec
def sremarathon_step_report(step: int, outcome: Any, marathon: "Marathon") -> None:
    """Called after every agent step with the host's ``StepOutcome``."""


@hookspec(firstresult=True)
def sremarathon_choose_scorer(bundle: "Bundle") -> "Optional[Callable[[Bundle], MarathonScore]]":
    """Return a scoring function for this bundle, or None to use Marathon-Score."""


def standalone_plugin_manager() -> pluggy.PluginManager:
    """The plugin manager used outside pytest (the CLI)."""
    import sys

    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(sys.modules[__name__])
    pm.load_setuptools_entrypoints("sremarathon")
    return pm
