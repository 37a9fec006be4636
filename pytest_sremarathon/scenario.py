"""Scenario files → a validated :class:`Scenario`.

A scenario is a YAML file (the built-in ones are in ``pytest_sremarathon/scenarios/``,
``sremarathon init`` writes a commented one of your own). Its ``apps_dir`` is a directory
relative to the file, or ``builtin`` for the applications shipped with the package.

Every error names the file, the field and the fix; nothing here raises a raw traceback at a
user. Durations are written as ``90s``, ``5m``, ``12h`` (or plain seconds).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Literal, Optional

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator

from .agent_limits import DEFAULT_MEMORY, DEFAULT_PROCESSES, DEFAULT_WORKSPACE, AgentLimits
from .alerts.noise import NoiseConfig
from .apps import AppSpec, load_app
from .errors import ConfigError, describe_validation_error
from .faults.catalogue import CuratedChange, load_catalogue
from .policy import DEFAULT_RULES, RULES
from .thinktime import ThinkTime, parse_think_time

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        m = _DURATION.match(value)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)]
    raise ValueError(f"{value!r} is not a duration; write e.g. 30s, 5m, 12h")


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TopologyConfig(_Model):
    zones: list[str] = Field(default_factory=lambda: ["zone-a", "zone-b"], min_length=1)
    nodes_per_zone: int = Field(default=2, ge=1, le=20)
    node_cpu: str = "4"
    node_memory: str = "16Gi"


class ScheduleConfig(_Model):
    faults: int = Field(default=60, ge=0, le=1000)
    interarrival_weibull_shape: float = Field(default=0.64, gt=0)
    duration_ln_minutes_mu: float = 4.0
    duration_ln_minutes_sigma: float = Field(default=1.2, gt=0)
    duration_min: Seconds = 900.0
    duration_max: Seconds = 10800.0
    families: dict[str, float] = Field(default_factory=lambda: {"change": 0.65, "infrastructure": 0.35})
    code_share_of_changes: float = Field(default=0.55, ge=0, le=1)
    benign_per_faulty: float = Field(default=3.0, ge=0)
    warmup: Seconds = 900.0
    quiet_tail: Seconds = 900.0  # no new fault this close to the end

    @model_validator(mode="after")
    def _check(self) -> ScheduleConfig:
        if self.duration_min > self.duration_max:
            raise ValueError("duration_min is longer than duration_max")
        if any(w < 0 for w in self.families.values()) or (self.faults and sum(self.families.values()) <= 0):
            raise ValueError("families: give non-negative weights that sum to more than 0")
        return self


class AlertsConfig(_Model):
    noise: NoiseConfig = Field(default_factory=NoiseConfig)
    # The share of alerts that are not actionable (noise and symptoms away from the root cause)
    # a run should show; `sremarathon schedule --simulate` measures it.
    non_actionable_band: tuple[float, float] = (0.7, 0.9)


#: The default think time (issue 14): a tool-using LLM turn, model latency plus the tool, takes
#: several to tens of seconds (CALIBRATION, "Agent think time"); the built-in scenarios cite it.
DEFAULT_THINK_TIME = "per-request:10"


_QUANTITY = re.compile(r"^\s*[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?\s*$")


def _quantity(value: object) -> Optional[str]:
    """A Kubernetes-style byte quantity (``512Mi``, ``2Gi``, ``1G``), or none: unlimited."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "unlimited")):
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not _QUANTITY.match(text):
        raise ValueError(f"{value!r} is not a byte quantity; write it as Kubernetes does, e.g. 512Mi, 2Gi "
                         "(or `unlimited`)")
    return text


Quantity = Annotated[Optional[str], BeforeValidator(_quantity)]


class AgentConfig(_Model):
    step_budget: Seconds = 60.0
    # frozen | per-request:SECONDS | wall[:FACTOR] (thinktime.py); kept as its canonical spelling
    think_time: str = DEFAULT_THINK_TIME
    # The agent's process tree (agent_limits.py): resident memory of all its processes, how many
    # run at once, and what its workspace holds. Crossing one ends the step (outcome `limit`).
    memory_limit: Quantity = DEFAULT_MEMORY
    max_processes: Optional[int] = Field(default=DEFAULT_PROCESSES, ge=1, le=100000)
    workspace_limit: Quantity = DEFAULT_WORKSPACE

    @model_validator(mode="after")
    def _think_time(self) -> AgentConfig:
        self.think_time = str(parse_think_time(self.think_time))
        return self

    @property
    def limits(self) -> AgentLimits:
        return AgentLimits.parse(self.memory_limit, self.max_processes, self.workspace_limit)

    @property
    def think(self) -> ThinkTime:
        return parse_think_time(self.think_time)


class PipelineConfig(_Model):
    """How long a build takes (issue 14): per app, a duration drawn once per run from a
    lognormal in ln-minutes, clipped to [build_min, build_max], and per build a small jitter
    around it; ``builds: instant`` deploys at once (the behaviour before issue 14)."""

    builds: Literal["lognormal", "instant"] = "lognormal"
    build_ln_minutes_mu: float = 1.43
    build_ln_minutes_sigma: float = Field(default=1.31, ge=0)
    build_min: Seconds = 60.0
    build_max: Seconds = 900.0
    build_jitter: float = Field(default=0.15, ge=0)  # sd of a build's ln-duration around its app's

    @model_validator(mode="after")
    def _check(self) -> PipelineConfig:
        if self.build_min > self.build_max:
            raise ValueError("build_min is longer than build_max")
        return self


class PolicyConfig(_Model):
    rules: list[str] = Field(default_factory=lambda: list(DEFAULT_RULES))

    @model_validator(mode="after")
    def _known(self) -> PolicyConfig:
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown rule(s) {unknown}; known rules: {sorted(RULES)}")
        return self


class ScenarioFile(_Model):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    description: str = ""
    seed: int = 1
    duration: Seconds = 43200.0
    tick: Seconds = 30.0
    cadence: Seconds = 300.0
    segment: Seconds = 7200.0
    apps: list[str] = Field(min_length=1)
    apps_dir: str = "apps"  # relative to the scenario file, or BUILTIN_APPS
    topology: TopologyConfig = Field(default_factory=TopologyConfig)
    schedule: ScheduleConfig = Field(default_factory=ScheduleConfig)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    pipeline: PipelineConfig = Field(default_factory=PipelineConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)

    @model_validator(mode="after")
    def _multiples(self) -> ScenarioFile:
        if "segment" not in self.model_fields_set and self.segment > self.duration:
            self.segment = self.duration  # a short run is one segment unless told otherwise
        for field in ("cadence", "segment", "duration"):
            value = getattr(self, field)
            if abs(value / self.tick - round(value / self.tick)) > 1e-9:
                raise ValueError(f"{field} ({value:g}s) must be a whole number of ticks ({self.tick:g}s)")
        if self.segment > self.duration:
            raise ValueError(f"segment ({self.segment:g}s) is longer than the whole run ({self.duration:g}s)")
        return self


class Scenario:
    """A loaded scenario: the validated file plus its applications and change catalogues."""

    def __init__(self, path: Path, spec: ScenarioFile, apps: list[AppSpec],
                 catalogues: dict[str, list[CuratedChange]], text: str) -> None:
        self.path = path
        self.spec = spec
        self.apps = apps
        self.catalogues = catalogues
        self.text = text
        self.digest = "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def apps_root(self) -> Path:
        return apps_root(self.path, self.spec.apps_dir)

    def with_overrides(self, *, duration: Optional[float] = None, faults: Optional[int] = None,
                       think_time: Optional[str] = None) -> Scenario:
        data = self.spec.model_dump()
        if think_time is not None:
            data["agent"]["think_time"] = str(parse_think_time(think_time))
        if duration is not None:
            data["duration"] = duration
            data["segment"] = min(data["segment"], duration)
        if faults is not None:
            data["schedule"]["faults"] = faults
        return Scenario(self.path, ScenarioFile.model_validate(data), self.apps, self.catalogues, self.text)


#: ``apps_dir: builtin``: the applications shipped with the package (``builtin.APPS_DIR``).
BUILTIN_APPS = "builtin"


def apps_root(path: Path, apps_dir: str) -> Path:
    """The directory holding one ``<app>/`` per application: ``apps_dir`` relative to the
    scenario file, or the package's own applications for ``builtin``."""
    if apps_dir == BUILTIN_APPS:
        from .builtin import APPS_DIR

        return APPS_DIR
    return (path.parent / Path(apps_dir).expanduser()).resolve()


def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        from .builtin import names_line

        raise ConfigError(f"{path}: scenario file not found (give the path of a scenario .yaml file, or the name "
                          f"of a built-in one: {names_line()}; `sremarathon init` writes a file to start from)") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory; give the scenario's .yaml file") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a scenario is a mapping with at least `name:` and `apps:`")
    try:
        spec = ScenarioFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(path, exc)) from None
    root = apps_root(path, spec.apps_dir)
    if not root.is_dir():
        raise ConfigError(f"{path}: apps_dir: no directory {root} (apps_dir is relative to the scenario file; "
                          f"`apps_dir: {BUILTIN_APPS}` runs the applications shipped with pytest-sremarathon)")
    apps, catalogues = [], {}
    for name in spec.apps:
        app_root = root / name
        if not app_root.is_dir():
            available = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "__pycache__")
            raise ConfigError(f"{path}: apps: no application {name!r} in {root} "
                              f"(available: {', '.join(available) or 'none'})")
        app = load_app(app_root)
        apps.append(app)
        catalogues[app.namespace] = load_catalogue(app_root)
    return Scenario(path, spec, apps, catalogues, text)
