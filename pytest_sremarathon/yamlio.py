"""YAML parsing for the hot paths (the apps' change catalogues and manifests, read again on
every deploy and fault check): libyaml's safe loader when PyYAML was built with it — about ten
times faster — else PyYAML's pure-Python safe loader. Both raise ``yaml.YAMLError``."""

from __future__ import annotations

from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load(text: str) -> Any:
    return yaml.load(text, Loader=LOADER)


def load_all(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=LOADER))
