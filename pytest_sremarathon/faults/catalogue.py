"""Curated changes per application (``<apps_dir>/<app>/changes/*.yaml``): what the
orchestrator ships through the pipeline, benign or faulty."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import yamlio
from ..errors import ConfigError, describe_validation_error


class Edit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    find: str = Field(min_length=1)
    replace: str


class FaultTag(BaseModel):
    """Marks a curated change as faulty: which kind, where, and what identifies it."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    service: str
    signature: Optional[str] = None  # code-*: text present exactly while the faulty code is in the tree
    key: Optional[str] = None  # config-*: the ConfigMap key …
    value: Optional[str] = None  # … config-* and manifest-*: the bad value
    object: Optional[str] = None  # manifest-*: "Deployment", "StatefulSet" or "Service" (named after the service)
    field: Optional[str] = None  # manifest-*: dotted path, e.g. spec.template.spec.containers[0].resources.limits.memory
    trigger: Optional[str] = None  # manifest-hotfix-undone: the benign change whose routine deploy undoes the hotfix


class CuratedChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    author: str
    message: str
    edits: list[Edit] = Field(min_length=1)
    fault: Optional[FaultTag] = None

    @property
    def faulty(self) -> bool:
        return self.fault is not None


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    changes: list[CuratedChange]


def load_catalogue(app_root: Path) -> list[CuratedChange]:
    out: list[CuratedChange] = []
    for path in sorted((app_root / "changes").glob("*.yaml")):
        try:
            raw = yamlio.load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
        try:
            out.extend(_File.model_validate(raw or {"changes": []}).changes)
        except ValidationError as exc:
            raise ConfigError(describe_validation_error(path, exc)) from None
    seen: set[str] = set()
    for c in out:
        if c.id in seen:
            raise ConfigError(f"{app_root / 'changes'}: change id {c.id!r} is used twice; ids must be unique per app")
        seen.add(c.id)
    return out
