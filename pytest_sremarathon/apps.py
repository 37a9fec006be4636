"""Application definitions (``<apps_dir>/<app>/app.yaml``; the built-in ones in ``pytest_sremarathon/scenarios/apps/``): services, call graph, traffic."""

from __future__ import annotations

import functools
import random
from pathlib import Path
from typing import Any, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError, describe_validation_error

ParamChoices = Union[list[Any], str]  # a list of values, or "u1..400" (prefix + integer range)


class RequestMix(BaseModel):
    model_config = ConfigDict(extra="forbid")
    endpoint: str
    weight: float = Field(gt=0)
    params: dict[str, ParamChoices] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _ranges_parse(cls, v: dict[str, ParamChoices]) -> dict[str, ParamChoices]:
        for key, choices in v.items():
            if isinstance(choices, str) and ".." not in choices:
                raise ValueError(f"param {key!r}: give a list of values or a range like 'u1..400'")
        return v


class Traffic(BaseModel):
    model_config = ConfigDict(extra="forbid")
    entry: str
    base_rps: float = Field(gt=0)
    requests: list[RequestMix] = Field(min_length=1)

    def plan(self, samples: int) -> list[tuple[RequestMix, int, float]]:
        """Stratified sampling: (request type, samples this tick, share of traffic) with at
        least one sample per type, so rare endpoints are observed every tick."""
        total = sum(r.weight for r in self.requests)
        return [(r, max(1, round(samples * r.weight / total)), r.weight / total) for r in self.requests]

    @staticmethod
    def params(mix: RequestMix, rng: random.Random) -> dict[str, Any]:
        params: dict[str, Any] = {}
        for key, choices in mix.params.items():
            if isinstance(choices, str):
                prefix, lo, hi = _param_range(choices)
                params[key] = f"{prefix}{rng.randint(lo, hi)}"
            else:
                params[key] = rng.choice(choices)
        return params


@functools.lru_cache(maxsize=256)
def _param_range(choices: str) -> tuple[str, int, int]:
    """``"u1..400"`` -> ("u", 1, 400); parsed once, not for every sampled request."""
    prefix_lo, hi = choices.split("..")
    digits = len(prefix_lo) - len(prefix_lo.rstrip("0123456789"))
    return prefix_lo[: len(prefix_lo) - digits], int(prefix_lo[len(prefix_lo) - digits:]), int(hi)


class ServiceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replicas: int = Field(default=2, ge=0)
    slo_p99_ms: Optional[float] = None
    calls: list[str] = Field(default_factory=list)
    datastore: Optional[str] = None  # a stock image: the service is a datastore, not app code


class ExternalFallback(BaseModel):
    """The switch that keeps the app working while a provider is down: every pod of ``service``
    running with configuration ``key`` set to ``value``."""

    model_config = ConfigDict(extra="forbid")
    service: str
    key: str
    value: str


class ExternalSpec(BaseModel):
    """A third-party API outside the cluster, called with ``ctx.external(name, op, payload)``."""

    model_config = ConfigDict(extra="forbid")
    host: str
    latency_ms: float = Field(default=10.0, ge=0)
    used_by: list[str] = Field(default_factory=list)
    fallback: Optional[ExternalFallback] = None


class AppSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    name: str
    namespace: str
    description: str = ""
    traffic: Traffic
    services: dict[str, ServiceSpec]
    externals: dict[str, ExternalSpec] = Field(default_factory=dict)
    root: Path = Path(".")

    def code_services(self) -> list[str]:
        return [s for s, spec in self.services.items() if spec.datastore is None]

    def callers_of(self, service: str) -> set[str]:
        """Every service that (transitively) calls ``service``: where its failures show up."""
        out: set[str] = set()
        frontier = {service}
        while frontier:
            nxt = {s for s, spec in self.services.items() if frontier & set(spec.calls)} - out
            out |= nxt
            frontier = nxt
        return out


def load_app(root: Path) -> AppSpec:
    path = root / "app.yaml"
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: application definition not found (each app needs an app.yaml)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    try:
        app = AppSpec.model_validate({**(raw or {}), "root": root})
    except ValidationError as exc:
        raise ConfigError(describe_validation_error(path, exc)) from None
    if app.traffic.entry not in app.services:
        raise ConfigError(f"{path}: traffic.entry {app.traffic.entry!r} is not one of the services "
                          f"({', '.join(app.services)}); name the service that receives user traffic")
    for svc, spec in app.services.items():
        unknown = [c for c in spec.calls if c not in app.services]
        if unknown:
            raise ConfigError(f"{path}: services.{svc}.calls names unknown service(s) {unknown}")
        if spec.datastore is None and not (root / "services" / f"{svc}.py").exists():
            raise ConfigError(f"{path}: services.{svc} has no code at services/{svc}.py "
                              f"(add the module, or mark it a datastore with `datastore: <image>`)")
    for name, ext in app.externals.items():
        named = ext.used_by + ([ext.fallback.service] if ext.fallback else [])
        unknown = [s for s in named if s not in app.services]
        if unknown:
            raise ConfigError(f"{path}: externals.{name} names unknown service(s) {unknown}")
    return app
