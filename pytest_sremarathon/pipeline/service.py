"""The build-and-deploy pipeline that both the orchestrator's changes and the agent's repairs
go through: commit → build (unit tests, artifacts) → deploy (ConfigMaps, Services, Deployments
with the artifacts' image digests) — and revert."""

from __future__ import annotations

import hashlib
import textwrap
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Literal, Optional

from .. import yamlio
from ..agent.protocol import Change
from ..apps import AppSpec
from ..events import ChangeCommitted, Deployed
from ..twin.cluster import TwinCluster
from ..twin.runtime import Artifact
from .build import BuildError, build
from .repo import Author, GitError, GitRepo

Actor = Literal["agent", "orchestrator"]
CONFIG_HASH = "sremarathon.dev/config-hash"
CHANGE_CAUSE = "kubernetes.io/change-cause"


class PipelineError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ChangeRecord:
    change: Change
    commit: str
    actor: Actor


@dataclass
class AppPipeline:
    app: AppSpec
    repo: GitRepo
    changes: list[ChangeRecord] = field(default_factory=list)
    deployed: Optional[str] = None  # commit
    deployed_files: dict[str, str] = field(default_factory=dict)
    artifacts: dict[str, Artifact] = field(default_factory=dict)
    rendered: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)


def apply_edit(text: str, find: str, replace: str) -> Optional[str]:
    """Replace the first occurrence of ``find`` that starts a line; a block written without its
    indentation (as YAML block scalars store it) matches at the indentation it has in the file."""
    for indent in ("", "    ", "        ", "            "):
        f = textwrap.indent(find, indent)
        at = 0 if text.startswith(f) else ("\n" + text).find("\n" + f)
        if at >= 0:
            return text[:at] + textwrap.indent(replace, indent) + text[at + len(f):]
    return None


def _without_change_cause(obj: dict[str, Any]) -> dict[str, Any]:
    annotations = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k != CHANGE_CAUSE}
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


def _clone(doc: Any) -> Any:
    """A copy of parsed YAML to edit: new dicts and lists, shared scalars (all immutable) —
    several times faster than ``copy.deepcopy``, which deploys would spend most of their time in."""
    if isinstance(doc, dict):
        return {k: _clone(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_clone(v) for v in doc]
    return doc


def _change_kind(paths: list[str]) -> Literal["code", "config", "manifest"]:
    if any(p.startswith("services/") for p in paths):
        return "code"
    if any(p.startswith("config/") for p in paths):
        return "config"
    return "manifest"


def _service_of(app: AppSpec, paths: list[str]) -> Optional[str]:
    for p in paths:
        stem = Path(p).stem
        if stem in app.services:
            return stem
    return None


class Pipelines:
    """One pipeline per application; every action is recorded through ``emit``."""

    def __init__(self, apps: list[AppSpec], cluster: TwinCluster, root: Path, clock: Callable[[], datetime],
                 emit: Callable[[str, Any], None]) -> None:
        self.cluster = cluster
        self.clock = clock
        self.emit = emit
        self.root = root
        self.apps: dict[str, AppPipeline] = {}
        self.workspace: Optional[Path] = None
        self._synced: dict[str, str] = {}
        self._parsed: dict[tuple[bool, str], Any] = {}
        for app in apps:
            repo = GitRepo.create(root / app.namespace, app.root, clock(), f"Import {app.name} {app.description}".strip())
            self.apps[app.namespace] = AppPipeline(app, repo)

    def _get(self, app: str) -> AppPipeline:
        p = self.apps.get(app)
        if p is None:
            raise PipelineError(404, f"unknown app {app!r}; apps: {', '.join(sorted(self.apps))}")
        return p

    # -- the agent-visible operations ------------------------------------------------------
    def changes(self, app: str) -> list[Change]:
        return [r.change for r in self._get(app).changes]

    def status(self, app: str) -> dict[str, Any]:
        p = self._get(app)
        return {"app": app, "head": p.repo.head()[:12], "deployed": (p.deployed or "")[:12],
                "services": {svc: a.digest for svc, a in sorted(p.artifacts.items())}}

    def revert(self, app: str, change_id: str, actor: Actor) -> Change:
        p = self._get(app)
        record = self._find(p, change_id)
        try:
            commit = p.repo.revert(record.commit, self._author(actor), self.clock())
        except GitError as exc:
            raise PipelineError(409, str(exc)) from None
        reverted = self._record_commit(p, commit, actor).change
        self._deploy(p, commit, "HEAD", actor)
        return reverted

    def attach_workspace(self, root: Path) -> None:
        """Give the agent a git checkout of every app under ``root/<app>`` to commit to; its
        ``deploy(app, ref)`` of a commit made there is a push to main (fast-forward only)."""
        self.workspace = root
        for app, p in self.apps.items():
            p.repo.clone_to(root / app)
        self._synced = {app: p.repo.head() for app, p in self.apps.items()}

    def sync_workspace(self) -> Callable[[], None]:
        """Start bringing each checkout's ``origin/main`` up to date; returns a function that
        waits for it. The fetches run in their own processes, so the caller can simulate a
        tick meanwhile."""
        fetches = []
        if self.workspace is not None:
            for app, p in self.apps.items():
                head = p.repo.head()
                clone = self.workspace / app
                if self._synced.get(app) != head and (clone / ".git").is_dir():
                    fetches.append(GitRepo(clone).start("fetch", "-q", "origin"))
                    self._synced[app] = head

        def wait() -> None:
            for proc in fetches:
                proc.wait()

        return wait

    def _push_from_workspace(self, p: AppPipeline, ref: str) -> Optional[str]:
        """If ``ref`` names a commit the agent made in its checkout, fast-forward main onto it."""
        clone = self.workspace / p.app.namespace if self.workspace is not None else None
        if clone is None or not (clone / ".git").is_dir():
            return None
        try:
            sha = GitRepo(clone).resolve(ref)
        except GitError:  # not a commit of the checkout: a change id or main's own ref
            return None
        if p.repo.has(sha):
            return None
        try:
            new = p.repo.fast_forward_from(clone, sha)
        except GitError as exc:
            raise PipelineError(409, str(exc)) from None
        for commit in new:
            self._record_commit(p, commit, "agent")
        return sha

    def deploy(self, app: str, ref: str, actor: Actor) -> dict[str, Any]:
        p = self._get(app)
        pushed = self._push_from_workspace(p, ref) if actor == "agent" else None
        try:
            commit = pushed or p.repo.resolve(self._find(p, ref).commit if self._known(p, ref) else ref)
        except GitError as exc:
            raise PipelineError(404, str(exc)) from None
        return self._deploy(p, commit, ref, actor)

    def _deploy(self, p: AppPipeline, commit: str, ref: str, actor: Actor) -> dict[str, Any]:
        app = p.app.namespace
        files = p.repo.files_at(commit)
        try:
            result = build(p.app, files)
        except BuildError as exc:
            raise PipelineError(422, str(exc)) from None
        for artifact in result.artifacts.values():
            self.cluster.artifacts.put(artifact)
        message = next((r.change.message for r in reversed(p.changes) if r.commit == commit), "initial import")
        for obj in self._render(p.app, files, result.artifacts, commit, message):
            key = (obj["kind"], obj["metadata"]["name"])
            previous = p.rendered.get(key)
            # Only what the change touched is applied: an unrelated deploy keeps kubectl edits.
            if previous is None or _without_change_cause(previous) != _without_change_cause(obj):
                self.cluster.apply(obj)
                p.rendered[key] = obj
        p.deployed, p.deployed_files, p.artifacts = commit, files, result.artifacts
        self.emit("pipeline.deploy", Deployed(actor=actor, app=app, ref=ref, commit=commit[:12],
                                              artifacts={s: a.digest for s, a in sorted(result.artifacts.items())}))
        return {"app": app, "deployed": commit[:12], "tests": result.tests_run,
                "services": {s: a.digest for s, a in sorted(result.artifacts.items())}}

    # -- the orchestrator's side -----------------------------------------------------------
    def commit_edits(self, app: str, edits: list[tuple[str, str, str]], message: str, author: str) -> Change:
        """Apply (file, find, replace) edits as one commit by ``author``; returns the change."""
        p = self._get(app)
        for path, find, replace in edits:
            target = p.repo.path / path
            edited = apply_edit(target.read_text(), find, replace)
            if edited is None:
                raise PipelineError(409, f"{app}/{path}: the text this change edits is not there any more")
            target.write_text(edited)
        commit = p.repo.commit_all(message, Author.parse(author), self.clock())
        return self._record_commit(p, commit, "orchestrator").change

    def head_file(self, app: str, path: str) -> str:
        target = self._get(app).repo.path / path
        return target.read_text() if target.exists() else ""

    def deployed_file(self, app: str, path: str) -> str:
        return self._get(app).deployed_files.get(path, "")

    # -- internals -------------------------------------------------------------------------
    def _author(self, actor: Actor) -> Author:
        return Author("sre-agent", "sre-agent@sremarathon.local") if actor == "agent" else \
            Author("oncall-human", "oncall@sremarathon.local")

    def _known(self, p: AppPipeline, ref: str) -> bool:
        return any(r.change.id == ref for r in p.changes)

    def _find(self, p: AppPipeline, change_id: str) -> ChangeRecord:
        for r in p.changes:
            if r.change.id == change_id or (len(change_id) >= 7 and r.commit.startswith(change_id)):
                return r
        raise PipelineError(404, f"no change {change_id!r} in {p.app.namespace}; list them with pipeline.changes(app)")

    def _record_commit(self, p: AppPipeline, commit: str, actor: Actor) -> ChangeRecord:
        info = p.repo.show(commit)
        change = Change(id=commit[:12], app=p.app.namespace, service=_service_of(p.app, info.paths),
                        kind=_change_kind(info.paths), author=info.author, message=info.message, time=self.clock(),
                        diff=info.diff)
        record = ChangeRecord(change, commit, actor)
        p.changes.append(record)
        data = change.model_dump(mode="json")
        data["diff"] = data["diff"][:4000]
        self.emit("pipeline.change", ChangeCommitted(actor=actor, app=p.app.namespace, change=data))
        return record

    def _parse(self, text: str, *, many: bool) -> Any:
        """YAML documents of a file, parsed once per distinct content (deploys repeat them)."""
        key = (many, text)
        if key not in self._parsed:
            self._parsed[key] = [d for d in yamlio.load_all(text) if d] if many else (yamlio.load(text) or {})
        return _clone(self._parsed[key])

    def _render(self, app: AppSpec, files: dict[str, str], artifacts: dict[str, Artifact], commit: str,
                message: str) -> list[dict[str, Any]]:
        configs: dict[str, dict[str, Any]] = {}
        for path, text in sorted(files.items()):
            if path.startswith("config/") and path.endswith(".yaml"):
                svc = Path(path).stem
                data = {k: str(v) for k, v in self._parse(text, many=False).items()}
                configs[svc] = {"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": f"{svc}-config", "namespace": app.namespace,
                                             "labels": {"app": svc, "app.kubernetes.io/part-of": app.name}},
                                "data": data}
        objects: list[dict[str, Any]] = list(configs.values())
        workloads = []
        for path, text in sorted(files.items()):
            if not (path.startswith("manifests/") and path.endswith(".yaml")):
                continue
            for doc in self._parse(text, many=True):
                doc.setdefault("metadata", {})["namespace"] = app.namespace
                if doc.get("kind") == "Deployment":
                    self._pin_images(doc, app, artifacts, configs)
                    doc["metadata"].setdefault("annotations", {})[CHANGE_CAUSE] = f"deploy {commit[:12]}: {message}"
                    workloads.append(doc)
                else:
                    objects.append(doc)
        return objects + workloads

    @staticmethod
    def _pin_images(doc: dict[str, Any], app: AppSpec, artifacts: dict[str, Artifact],
                    configs: dict[str, dict[str, Any]]) -> None:
        template = doc["spec"]["template"]
        for c in template["spec"].get("containers") or []:
            image = c.get("image", "")
            svc = image.split("/", 1)[1] if image.startswith(f"{app.namespace}/") else None
            if svc and svc in artifacts:
                c["image"] = artifacts[svc].image
        # Roll the pods when their configuration changes (the checksum/config pattern).
        refs = [e["configMapRef"]["name"] for c in template["spec"].get("containers") or []
                for e in c.get("envFrom") or [] if "configMapRef" in e]
        blob = "".join(repr(sorted(configs.get(r[: -len("-config")], {}).get("data", {}).items())) for r in refs)
        if refs:
            template.setdefault("metadata", {}).setdefault("annotations", {})[CONFIG_HASH] = \
                hashlib.sha256(blob.encode()).hexdigest()[:16]
