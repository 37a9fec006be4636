"""Artifacts on disk: what a service image carries besides the runtime.

An artifact directory holds the service's source files at their artifact paths
(``services/cart.py``, ``services/lib.py``) and ``artifact.json``::

    {"format": 1, "app": "shop", "service": "cart", "digest": "sha256:…",
     "entry": "services/cart.py", "files": ["services/cart.py", "services/lib.py"]}

In the image it is ``/app``, so a traceback's ``File "/app/services/cart.py"`` is a real path in
the container — the same path the twin prints. The digest is the build step's content digest
(:func:`package`), recomputed and checked on load, so a pod's
image tag, the pipeline's record and the code that runs agree byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from .code import DATASTORE_SOURCE, Artifact, datastore_artifact

if TYPE_CHECKING:
    from ..apps import AppSpec

MANIFEST = "artifact.json"
FORMAT = 1


class ArtifactError(Exception):
    """An artifact directory that is missing, incomplete or does not match its digest."""


def content_digest(files: dict[str, str]) -> str:
    """The build step's digest of an artifact's files (path, NUL, text, NUL; sorted by path)."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(path.encode() + b"\0" + files[path].encode() + b"\0")
    return f"sha256:{h.hexdigest()}"


def short_digest(digest: str) -> str:
    """The 12 hex characters that tag an image: ``sha256:0123456789ab…`` -> ``0123456789ab``."""
    return digest.split(":", 1)[-1][:12]


def write_artifact(artifact: Artifact, dest: Path, *, datastore_image: str | None = None) -> Path:
    """Write ``artifact`` as a directory (created if needed); returns ``dest``. A datastore's
    artifact (:func:`datastore`) names the stock image its digest was derived from."""
    dest.mkdir(parents=True, exist_ok=True)
    for path, text in sorted(artifact.files.items()):
        target = dest / path
        if ".." in Path(path).parts or Path(path).is_absolute():
            raise ArtifactError(f"artifact path {path!r} leaves the artifact directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    (dest / MANIFEST).write_text(json.dumps({
        "format": FORMAT, "app": artifact.app, "service": artifact.service, "digest": artifact.digest,
        "entry": artifact.entry, "files": sorted(artifact.files),
        **({"datastore_image": datastore_image} if datastore_image else {})}, indent=1) + "\n")
    return dest


def read_artifact(src: Path, *, verify: bool = True) -> Artifact:
    """Load an artifact directory written by :func:`write_artifact` (the digest is checked
    unless ``verify`` is false, e.g. for the datastore whose digest names a stock image)."""
    manifest = src / MANIFEST
    try:
        meta = json.loads(manifest.read_text())
    except FileNotFoundError:
        raise ArtifactError(f"{manifest}: no artifact manifest (build the image with the pipeline, or pass "
                            f"--apps-dir to build from source)") from None
    except ValueError as exc:
        raise ArtifactError(f"{manifest}: not valid JSON: {exc}") from None
    missing = [k for k in ("app", "service", "digest", "entry", "files") if k not in meta]
    if missing:
        raise ArtifactError(f"{manifest}: missing field(s) {missing}")
    files = {}
    for path in meta["files"]:
        try:
            files[path] = (src / path).read_text()
        except FileNotFoundError:
            raise ArtifactError(f"{src}: artifact file {path} is missing") from None
    if meta["entry"] not in files:
        raise ArtifactError(f"{manifest}: entry {meta['entry']!r} is not one of the artifact's files")
    if meta.get("datastore_image"):
        expected = datastore(meta["app"], meta["service"], meta["datastore_image"])
        actual = expected.digest if files == expected.files else "(other files)"
    else:
        actual = content_digest(files)
    if verify and actual != meta["digest"]:
        raise ArtifactError(f"{src}: files do not match digest {meta['digest']} (got {actual}); "
                            f"the artifact was modified after the build")
    return Artifact(meta["app"], meta["service"], meta["digest"], meta["entry"], files)


def datastore(app: str, service: str, image: str) -> Artifact:
    """The built-in key-value datastore (the twin's ``DATASTORE_SOURCE``) standing for the stock
    ``image``; its digest is the twin's for that image."""
    return datastore_artifact(app, service, image)


def is_datastore(artifact: Artifact) -> bool:
    return artifact.files.get(artifact.entry) == DATASTORE_SOURCE


def _helpers(app: AppSpec, files: dict[str, str]) -> dict[str, str]:
    """Shared modules: files in services/ that are not a service of their own."""
    return {p: s for p, s in files.items() if p.startswith("services/") and p.endswith(".py")
            and p[len("services/"):-3] not in app.services}


def package(app: AppSpec, files: dict[str, str]) -> dict[str, Artifact]:
    """Source files of one revision -> one artifact per code service (its entry module plus the
    shared helper modules), named by the digest of its content."""
    helpers = _helpers(app, files)
    out = {}
    for svc in app.code_services():
        entry = f"services/{svc}.py"
        if entry not in files:
            raise ArtifactError(f"{app.name}: service {svc} has no {entry} in this revision")
        content = {entry: files[entry], **helpers}
        h = hashlib.sha256()
        for path in sorted(content):
            h.update(path.encode() + b"\0" + content[path].encode() + b"\0")
        out[svc] = Artifact(app.namespace, svc, f"sha256:{h.hexdigest()}", entry, content)
    return out
