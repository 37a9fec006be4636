"""The build-and-deploy pipeline that both the orchestrator's changes and the agent's repairs
go through: commit → build (unit tests, artifacts) → deploy (ConfigMaps, Services, Deployments
with the artifacts' image digests) — and revert.

Without build times (:meth:`Pipelines.configure` not called, or ``builds: instant``) a deploy
builds and applies at once. With them (:class:`~.builds.BuildTimes`), ``deploy`` and ``revert``
queue a :class:`~.builds.Build`: one build runs at a time per app, for its drawn duration;
:meth:`Pipelines.advance` (called every tick) finishes it — runs the unit tests, applies the
rendered objects, which starts the rollout — and starts the next. The build is ``deploying``
until every Deployment it changed has rolled out (``deployed``), or its rollout exceeded its
progress deadline or failed its tests (``failed``). Consecutive queued builds of the
orchestrator's coalesce into the newest (a CI system's auto-cancel of redundant pipelines); the
agent's are never coalesced, so each of its repairs is deployed as its own action.
"""

from __future__ import annotations

import hashlib
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Optional

from .. import yamlio
from ..agent.protocol import Change
from ..apps import AppSpec
from ..clock import iso
from ..cluster import Cluster
from ..events import BuildRecord, ChangeCommitted, Deployed
from ..runtime.code import Artifact
from .build import BuildError, build
from .builds import Actor, Build, BuildTimes
from .mirror import CheckoutMirror
from .repo import Author, GitError, GitRepo

CONFIG_HASH = "sremarathon.dev/config-hash"
CHANGE_CAUSE = "kubernetes.io/change-cause"
MAX_RENDERED = 1024  # manifest files' rendered objects kept (Pipelines._render)


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
    order: dict[str, int] = field(default_factory=dict)  # commit -> position in changes (main is linear)
    queue: list[Build] = field(default_factory=list)
    building: Optional[Build] = None
    rolling: list[Build] = field(default_factory=list)  # deploying: rollout under way
    history: list[Build] = field(default_factory=list)  # finished, newest last (a few kept)


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

    def __init__(self, apps: list[AppSpec], cluster: Cluster, root: Path, clock: Callable[[], datetime],
                 emit: Callable[[str, Any], None]) -> None:
        self.cluster = cluster
        self.clock = clock
        self.emit = emit
        self.root = root
        self.apps: dict[str, AppPipeline] = {}
        self.workspace: Optional[Path] = None
        self._synced: dict[str, str] = {}
        self._mirrors: dict[str, CheckoutMirror] = {}  # app -> its checkout's origin/main
        self._parsed: dict[tuple[bool, str], Any] = {}
        # Rendered objects per file, keyed by everything the rendering reads (see _render). They
        # are shared between deploys and never edited: what is applied is a copy.
        self._config_maps: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._manifests: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        self.builds: Optional[BuildTimes] = None
        self._build_count = 0
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
        """Head, what is deployed (the commit whose rollout started last) and its images, and
        the builds: queued, building and deploying ones with their times, then the last few
        finished."""
        p = self._get(app)
        out: dict[str, Any] = {"app": app, "head": p.repo.head()[:12], "deployed": (p.deployed or "")[:12],
                               "services": {svc: a.digest for svc, a in sorted(p.artifacts.items())}}
        if self.builds is not None:
            active = ([p.building] if p.building else []) + list(p.queue) + list(p.rolling)
            out["builds"] = [b.public() for b in sorted(active, key=lambda b: b.id)] + \
                [b.public() for b in p.history[-5:][::-1]]
        return out

    def revert(self, app: str, change_id: str, actor: Actor, queued: Optional[list[Build]] = None) -> Change:
        """Commit the inverse of ``change_id`` and deploy it (at once, or queue its build;
        ``queued`` collects the build for the caller)."""
        p = self._get(app)
        record = self._find(p, change_id)
        try:
            commit = p.repo.revert(record.commit, self._author(actor), self.clock())
        except GitError as exc:
            raise PipelineError(409, str(exc)) from None
        reverted = self._record_commit(p, commit, actor).change
        if self.builds is None:
            self._deploy(p, commit, "HEAD", actor)
        else:
            build_ = self._queue(p, commit, "HEAD", actor, announce=queued is None)
            if queued is not None:
                queued.append(build_)
        return reverted

    # -- build times ---------------------------------------------------------------------
    def configure(self, builds: Optional[BuildTimes]) -> None:
        """Give builds their durations from now on (``None``: deploy at once)."""
        self.builds = builds

    @property
    def defers(self) -> bool:
        """Do deploys wait for a build (and so take effect later than the request)?"""
        return self.builds is not None

    def attach_action(self, queued: list[Build], action: Optional[str]) -> None:
        """The policy point's id of the agent action that queued these builds (collected with
        ``queued=``): they are announced, and an idle builder takes them, now."""
        for b in queued:
            b.action = action
            self._announce(self._get(b.app), b)

    def is_deployed(self, app: str, change_id: Optional[str]) -> bool:
        """Has a deploy containing ``change_id`` started rolling out? (Main is linear: a commit
        contains every change recorded before it.)"""
        p = self._get(app)
        record = next((r for r in p.changes if r.change.id == change_id), None)
        if record is None or p.deployed is None:
            return False
        return p.order.get(record.commit, 1 << 30) <= p.order.get(p.deployed, -1)

    def in_flight(self, app: str) -> list[Build]:
        p = self._get(app)
        return ([p.building] if p.building else []) + list(p.queue) + list(p.rolling)

    def _queue(self, p: AppPipeline, commit: str, ref: str, actor: Actor, announce: bool = True) -> Build:
        self._build_count += 1
        b = Build(id=f"build-{self._build_count:05d}", app=p.app.namespace, commit=commit, ref=ref, actor=actor,
                  queued_at=self.clock())
        p.queue.append(b)
        if announce:
            self._announce(p, b)
        return b

    def _announce(self, p: AppPipeline, b: Build) -> None:
        self._emit_build(b)
        if p.building is None and p.queue and p.queue[0] is b:
            self._start(p, b.queued_at)  # an idle builder takes it at once (a finished one waits for the tick)

    def advance(self, now: datetime) -> None:
        """Finish the builds due by ``now`` (deploying them), start the next ones, and follow
        the rollouts under way. The marathon calls it once a tick, on its own thread."""
        if self.builds is None:
            return
        for p in self.apps.values():
            started_at: Optional[datetime] = None
            while True:
                b = p.building
                if b is not None:
                    assert b.finish_at is not None
                    if b.finish_at > now:
                        break
                    p.building = None
                    started_at = b.finish_at
                    self._finish(p, b, now)
                if not p.queue:
                    break
                self._start(p, started_at or now)
            self._follow_rollouts(p, now)

    def _start(self, p: AppPipeline, at: datetime) -> None:
        assert self.builds is not None
        head = p.queue[0]
        take = 0
        if head.actor == "orchestrator":  # coalesce the leading run of the orchestrator's builds
            while take + 1 < len(p.queue) and p.queue[take + 1].actor == "orchestrator":
                take += 1
        b = p.queue[take]
        at = max(at, b.queued_at)
        for old in p.queue[:take]:
            old.state, old.superseded_by, old.finished_at = "superseded", b.id, at
            self._retire(p, old)
        del p.queue[:take + 1]
        b.state, b.started_at = "building", at
        b.finish_at = at + self.builds.duration(p.app.namespace)
        p.building = b
        self._emit_build(b)

    def _finish(self, p: AppPipeline, b: Build, now: datetime) -> None:
        b.finished_at = b.finish_at
        try:
            changed = self._deploy(p, b.commit, b.ref, b.actor, action=b.action, build_id=b.id)["changed"]
        except PipelineError as exc:
            b.state, b.error = "failed", str(exc)
            self._retire(p, b)
            return
        for old in p.rolling:  # a rollout replaced before it completed
            old.state, old.superseded_by, old.completed_at = "superseded", b.id, now
            self._retire(p, old)
        p.rolling = []
        b.rollout_started_at = now
        b.workloads = changed
        b.state = "deploying"
        self._emit_build(b)
        p.rolling.append(b)

    def _follow_rollouts(self, p: AppPipeline, now: datetime) -> None:
        for b in list(p.rolling):
            states = [self._rollout_state(p.app.namespace, name) for name in b.workloads]
            if "failed" in states:
                b.state, b.error = "failed", "rollout exceeded its progress deadline"
            elif all(s == "complete" for s in states):
                b.state = "deployed"
            else:
                continue
            b.completed_at = now
            p.rolling.remove(b)
            self._retire(p, b)

    def _rollout_state(self, ns: str, name: str) -> str:
        """``kubectl rollout status``'s judgement: complete when the controller has seen the
        new template and every replica is updated and available; failed when the rollout
        exceeded its progress deadline."""
        store = getattr(self.cluster, "store", None)
        d = None
        if store is not None:  # the service's workload: a Deployment, or a datastore's StatefulSet
            d = store.get("Deployment", ns, name) or store.get("StatefulSet", ns, name)
        if d is None:
            return "complete"  # gone (or no store to read): nothing left to roll out
        status = d.get("status") or {}
        if int(status.get("observedGeneration", 0)) < int(d["metadata"].get("generation", 1)):
            return "progressing"
        reason = next((c.get("reason") for c in status.get("conditions") or [] if c.get("type") == "Progressing"), None)
        if reason == "ProgressDeadlineExceeded":
            return "failed"
        want = int((d.get("spec") or {}).get("replicas", 1))
        if int(status.get("updatedReplicas", 0)) >= want and int(status.get("availableReplicas", 0)) >= want \
                and int(status.get("replicas", 0)) <= want:
            return "complete"
        return "progressing"

    def _retire(self, p: AppPipeline, b: Build) -> None:
        self._emit_build(b)
        p.history.append(b)
        del p.history[:-20]

    def _emit_build(self, b: Build) -> None:
        at = {"queued": b.queued_at, "building": b.started_at}.get(b.state)
        self.emit("pipeline.build", BuildRecord(
            id=b.id, app=b.app, actor=b.actor, action=b.action, commit=b.commit[:12], ref=b.ref, state=b.state,
            at=iso(at) if at is not None else None,
            seconds=(b.finish_at - b.started_at).total_seconds() if b.state == "building" and b.finish_at
            and b.started_at else None,
            error=b.error, superseded_by=b.superseded_by, workloads=list(b.workloads)))

    def attach_workspace(self, root: Path) -> None:
        """Give the agent a git checkout of every app under ``root/<app>`` to commit to; its
        ``deploy(app, ref)`` of a commit made there is a push to main (fast-forward only)."""
        self.workspace = root
        for app, p in self.apps.items():
            clone = p.repo.clone_to(root / app)
            self._mirrors[app] = CheckoutMirror(p.repo.path, clone.path, clone.env)
        self._synced = {app: p.repo.head() for app, p in self.apps.items()}

    def sync_workspace(self) -> Callable[[], None]:
        """Start bringing each checkout's ``origin/main`` up to date; returns a function that
        waits for it. The fetches run in their own processes, so the caller can simulate a
        tick meanwhile."""
        waits: list[Callable[[], None]] = []
        if self.workspace is not None:
            for app, p in self.apps.items():
                head = p.repo.head()
                clone = self.workspace / app
                if self._synced.get(app) != head and (clone / ".git").is_dir():
                    mirror = self._mirrors.get(app)
                    if mirror is None:
                        mirror = self._mirrors[app] = CheckoutMirror(p.repo.path, clone, GitRepo(clone).env)
                    waits.append(mirror.sync())  # a fetch, or what it would do at less cost (see mirror.py)
                    self._synced[app] = head

        def wait() -> None:
            for w in waits:
                w()

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

    def deploy(self, app: str, ref: str, actor: Actor, queued: Optional[list[Build]] = None) -> dict[str, Any]:
        """Build and deploy ``ref`` (a change id, a commit, ``HEAD``, or a commit of the agent's
        checkout, pushed first). With build times the answer is the queued build
        (``{"app", "build", "state", "commit", "ref", "queued_at"}``); ``queued`` collects it."""
        p = self._get(app)
        pushed = self._push_from_workspace(p, ref) if actor == "agent" else None
        try:
            commit = pushed or p.repo.resolve(self._find(p, ref).commit if self._known(p, ref) else ref)
        except GitError as exc:
            raise PipelineError(404, str(exc)) from None
        if self.builds is None:
            out = self._deploy(p, commit, ref, actor)
            out.pop("changed")
            return {**out, "commit": out["deployed"], "state": "deployed"}
        b = self._queue(p, commit, ref, actor, announce=queued is None)
        if queued is not None:
            queued.append(b)
        return {"app": app, "build": b.id, "state": b.state, "commit": commit[:12], "ref": ref,
                "queued_at": iso(b.queued_at)}

    def _deploy(self, p: AppPipeline, commit: str, ref: str, actor: Actor, *, action: Optional[str] = None,
                build_id: Optional[str] = None) -> dict[str, Any]:
        app = p.app.namespace
        files = p.repo.files_at(commit)
        try:
            result = build(p.app, files)
        except BuildError as exc:
            raise PipelineError(422, str(exc)) from None
        for artifact in result.artifacts.values():
            self.cluster.artifacts.put(artifact)
        message = next((r.change.message for r in reversed(p.changes) if r.commit == commit), "initial import")
        changed: list[str] = []
        for obj in self._render(p.app, files, result.artifacts, commit, message):
            key = (obj["kind"], obj["metadata"]["name"])
            previous = p.rendered.get(key)
            # Only what the change touched is applied: an unrelated deploy keeps kubectl edits.
            if previous is None or _without_change_cause(previous) != _without_change_cause(obj):
                self.cluster.apply(_clone(obj))  # (obj is shared with later renders: see _render)
                p.rendered[key] = obj
                if obj["kind"] in ("Deployment", "StatefulSet"):
                    changed.append(obj["metadata"]["name"])
        p.deployed, p.deployed_files, p.artifacts = commit, files, result.artifacts
        self.emit("pipeline.deploy", Deployed(actor=actor, app=app, ref=ref, commit=commit[:12],
                                              artifacts={s: a.digest for s, a in sorted(result.artifacts.items())},
                                              action=action, build=build_id))
        return {"app": app, "deployed": commit[:12], "tests": result.tests_run,
                "services": {s: a.digest for s, a in sorted(result.artifacts.items())}, "changed": changed}

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

    def deployed_files(self, app: str) -> list[str]:
        """The paths of the revision last deployed."""
        return sorted(self._get(app).deployed_files)

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
        p.order.setdefault(commit, len(p.changes))
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
        """The objects a tree deploys: its ConfigMaps, its manifests' other objects, then its
        workloads (their images pinned to the artifacts, their pods' config hash, the change
        cause).

        A deploy renders every file of the tree, though a change touches one or two: each
        file's objects are kept, keyed by all they are made from — the file's text and the
        namespace; for a manifest also every artifact's image and every config file's text
        (what ``_pin_images`` reads). Only the change cause (commit and message) is added per
        deploy, on fresh copies of a workload and its metadata. The kept objects are shared,
        never edited here, and a copy of them is what is applied."""
        configs: dict[str, dict[str, Any]] = {}
        config_texts: list[tuple[str, str]] = []
        for path, text in sorted(files.items()):
            if path.startswith("config/") and path.endswith(".yaml"):
                svc = Path(path).stem
                configs[svc] = self._config_map(app, svc, text)
                config_texts.append((svc, text))
        objects: list[dict[str, Any]] = list(configs.values())
        workloads = []
        images = tuple(sorted((svc, a.image) for svc, a in artifacts.items()))
        cause = f"deploy {commit[:12]}: {message}"
        for path, text in sorted(files.items()):
            if not (path.startswith("manifests/") and path.endswith(".yaml")):
                continue
            key = (app.namespace, text, images, tuple(config_texts))
            docs = self._manifests.get(key)
            if docs is None:
                if len(self._manifests) >= MAX_RENDERED:  # (bounded: the oldest go first)
                    del self._manifests[next(iter(self._manifests))]
                docs = self._manifests[key] = self._render_manifest(app, text, artifacts, configs)
            for doc in docs:
                if doc.get("kind") in ("Deployment", "StatefulSet"):
                    md = doc["metadata"]
                    workloads.append({**doc, "metadata": {
                        **md, "annotations": {**(md.get("annotations") or {}), CHANGE_CAUSE: cause}}})
                else:
                    objects.append(doc)
        return objects + workloads

    def _config_map(self, app: AppSpec, svc: str, text: str) -> dict[str, Any]:
        key = (app.namespace, app.name, svc, text)
        cm = self._config_maps.get(key)
        if cm is None:
            data = {k: str(v) for k, v in self._parse(text, many=False).items()}
            cm = self._config_maps[key] = {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": f"{svc}-config", "namespace": app.namespace,
                             "labels": {"app": svc, "app.kubernetes.io/part-of": app.name}},
                "data": data}
        return cm

    def _render_manifest(self, app: AppSpec, text: str, artifacts: dict[str, Artifact],
                         configs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
        """A manifest file's objects in the namespace, workloads pinned (no change cause)."""
        docs = self._parse(text, many=True)
        for doc in docs:
            doc.setdefault("metadata", {})["namespace"] = app.namespace
            if doc.get("kind") in ("Deployment", "StatefulSet"):
                self._pin_images(doc, app, artifacts, configs)
        return docs

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
