"""The plugin's settings: every option (command line or ini key) read and checked once, at
``pytest_configure``, so that a bad value is a usage error before anything runs.

A value on the command line wins over the ini file. A relative path is relative to the
invocation directory on the command line and to the ini file's directory in the ini file (where
the user wrote it). Light: imported on every pytest run, with or without marathons.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

from . import builtin

DEFAULT_OUT = "sremarathon-runs"
DEFAULT_PROGRESS_SECONDS = 10.0


@dataclass(frozen=True)
class Settings:
    """The plugin's options, read and checked once (a bad value is a usage error)."""

    agent: Optional[str]
    agent_cmd: Optional[str]
    seeds: Optional[list[int]]
    backend: str
    out: Path
    min_score: Optional[float]
    baseline: Optional[Path]
    update_baseline: bool
    step_budget: Optional[float]
    signing_key: Optional[Path]
    scenario: Optional[Path]
    progress_interval: float
    keep_cluster: bool = False
    think_time: Optional[str] = None  # canonical spelling (thinktime.ThinkTime), None = the scenario's
    agent_exec: Optional[str] = None  # a per-step command (issue 17)

    @property
    def has_agent(self) -> bool:
        return bool(self.agent or self.agent_cmd or self.agent_exec)

    def session_scenario(self, rootpath: Path) -> Path:
        """The session's marathon: ``--marathon-scenario``, else ``<rootdir>/scenarios/marathon.yaml``
        when the project has one, else the built-in ``default``."""
        return self.scenario or builtin.default_scenario(rootpath)


def raw_option(config: pytest.Config, name: str) -> tuple[Optional[str], str]:
    """(value, where): the command line (``"option"``) wins over the ini file (``"ini"``)."""
    value = config.getoption(name, None)
    if value is not None:
        return str(value), "option"
    value = config.getini(name)
    return (str(value), "ini") if value not in (None, "", []) else (None, "")


def option(config: pytest.Config, name: str) -> Optional[str]:
    return raw_option(config, name)[0]


def agent_given(config: pytest.Config) -> bool:
    """Is an agent configured? Answered from the raw options (before :func:`read_settings`:
    ``pytest_cmdline_main`` runs before ``pytest_configure``)."""
    return bool(option(config, "agent") or option(config, "agent_cmd") or option(config, "agent_exec"))


def _base_dir(config: pytest.Config, where: str) -> Path:
    """What a relative path written ``where`` is relative to."""
    if where == "option":
        return Path(config.invocation_params.dir)
    return config.inipath.parent if config.inipath else config.rootpath


def _path_option(config: pytest.Config, name: str) -> Optional[Path]:
    value, where = raw_option(config, name)
    if value is None:
        return None
    return (_base_dir(config, where) / Path(value).expanduser()).resolve()


def _scenario_option(config: pytest.Config) -> Optional[Path]:
    """``--marathon-scenario`` / ``marathon_scenario``: a built-in's file for a name, else a path."""
    value, where = raw_option(config, "marathon_scenario")
    if value is None:
        return None
    if builtin.is_name(value):
        try:
            return builtin.builtin_path(value)
        except builtin.UnknownScenario as exc:
            flag = "--marathon-scenario" if where == "option" else f"marathon_scenario in {config.inipath}"
            raise pytest.UsageError(f"{flag} {value}: {exc}, or give the path of a scenario .yaml file") from None
    return _path_option(config, "marathon_scenario")


def _backend_known(backend: str, config: pytest.Config) -> bool:
    from .backends import resolve_backend

    return resolve_backend(backend, config.hook) is not None


def read_settings(config: pytest.Config) -> Settings:
    def number(name: str, low: Optional[float] = None, high: Optional[float] = None) -> Optional[float]:
        value = option(config, name)
        if value is None:
            return None
        flag = "--" + name.replace("_", "-")
        try:
            x = float(value)
        except ValueError:
            raise pytest.UsageError(f"{flag} takes a number, got {value!r}") from None
        if (low is not None and x < low) or (high is not None and x > high):
            raise pytest.UsageError(f"{flag} must be between {low:g} and {high:g}, got {value}"
                                    if high is not None else f"{flag} must be > {low:g}, got {value}")
        return x

    agent, agent_cmd, agent_exec = option(config, "agent"), option(config, "agent_cmd"), option(config, "agent_exec")
    if sum(bool(x) for x in (agent, agent_cmd, agent_exec)) > 1:
        raise pytest.UsageError("give one of --agent, --agent-cmd or --agent-exec")
    if agent_exec is not None and not agent_exec.strip():
        raise pytest.UsageError('--agent-exec is empty: give the command line to run each step, e.g. '
                                '--agent-exec "python my_agent.py"')
    seeds_opt = option(config, "marathon_seeds")
    seeds: Optional[list[int]] = None
    if seeds_opt is not None:
        try:
            seeds = list(dict.fromkeys(int(s) for s in seeds_opt.replace(" ", "").split(",") if s))
        except ValueError:
            seeds = []
        if not seeds:
            raise pytest.UsageError(f"--marathon-seeds takes comma-separated integers (e.g. 1,2,3), got {seeds_opt!r}")
    backend = option(config, "marathon_backend") or "twin"
    if backend.startswith("kubeconfig:"):
        base = _base_dir(config, raw_option(config, "marathon_backend")[1])
        path = (base / Path(backend[len("kubeconfig:"):]).expanduser()).resolve()
        if not path.is_file():
            raise pytest.UsageError(f"--marathon-backend {backend}: no such kubeconfig file: {path}")
        backend = f"kubeconfig:{path}"
    if backend != "twin" and not _backend_known(backend, config):  # (the default costs no import)
        from .backends import backend_factories

        known = [k + "PATH" if k.endswith(":") else k for k in backend_factories(config.hook)]
        raise pytest.UsageError(f"--marathon-backend {backend!r} is unknown; available: {', '.join(sorted(known))}")
    keep_cluster = bool(config.getoption("marathon_keep_cluster", None) or config.getini("marathon_keep_cluster"))
    budget = number("marathon_step_budget", low=0)
    if budget is not None and budget <= 0:
        raise pytest.UsageError(f"--marathon-step-budget must be > 0 seconds, got {budget:g}")
    baseline = _path_option(config, "marathon_baseline")
    update = bool(config.getoption("marathon_update_baseline", None) or config.getini("marathon_update_baseline"))
    if update and baseline is None:
        raise pytest.UsageError("--marathon-update-baseline needs --marathon-baseline FILE (the file to write)")
    key = _path_option(config, "marathon_signing_key")
    if key is not None and not key.is_file():
        raise pytest.UsageError(f"--marathon-signing-key: no such file: {key}")
    scenario = _scenario_option(config)
    if scenario is not None and (agent or agent_cmd or agent_exec) and not scenario.is_file():
        raise pytest.UsageError(f"--marathon-scenario: no such scenario file: {scenario} (give a file, or the name of "
                                f"a built-in scenario: {builtin.names_line()})")
    think = option(config, "marathon_think_time")
    if think is not None:
        from .thinktime import parse_think_time

        try:
            think = str(parse_think_time(think))
        except ValueError as exc:
            where = "--marathon-think-time" if raw_option(config, "marathon_think_time")[1] == "option" else \
                f"marathon_think_time in {config.inipath}"
            raise pytest.UsageError(f"{where}: {exc}") from None
    interval = option(config, "marathon_progress_interval")
    try:
        progress = float(interval) if interval is not None else DEFAULT_PROGRESS_SECONDS
    except ValueError:
        raise pytest.UsageError(f"marathon_progress_interval takes seconds, got {interval!r}") from None
    return Settings(agent=agent, agent_cmd=agent_cmd, seeds=seeds, backend=backend,
                    out=_path_option(config, "marathon_out") or (config.rootpath / DEFAULT_OUT).resolve(),
                    min_score=number("marathon_min_score", 0, 100), baseline=baseline, update_baseline=update,
                    step_budget=budget, signing_key=key, scenario=scenario,
                    progress_interval=progress, keep_cluster=keep_cluster, think_time=think, agent_exec=agent_exec)
