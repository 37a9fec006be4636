"""A pytest plugin (``-p e2e_path``): ``kubernetes.e2e_test`` is the vendored directory beside
this file, while the rest of ``kubernetes`` stays the installed client."""

from __future__ import annotations

from pathlib import Path

import kubernetes

kubernetes.__path__.append(str(Path(__file__).resolve().parent / "kubernetes"))
