"""Faults that arrive as changes through the deploy pipeline (code, configuration, manifests).

Injection commits a curated change (``<apps_dir>/<app>/changes/*.yaml``) and deploys it (its
build queues and takes time, like every build: the fault is active from the moment the rollout
of a deploy containing it starts); the root cause is ``service:<app>/<service>`` and the cause the pipeline change id. The on-call
cleanup at the end of the window reverts the change if it is still in the tree.

Each family judges mitigation from what the cluster actually runs, never from the repository:
the fault is mitigated once its faulty thing is *live nowhere* (no pod image carries the code, no
running pod has the configuration value, no live object or pod template has the manifest value)
and the service is serving again. So a revert that is committed but not deployed, a restart of
the bad pods, or a rollback of an unrelated change does not count; a revert, a rollback to an
earlier good ref, or an equivalent hand fix does.
"""

from __future__ import annotations

import copy
import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import yaml

from .. import yamlio
from ..k8s.objects import pod_is_active, pod_is_ready
from ..pipeline.service import PipelineError, apply_edit
from ..provenance import EvidenceRef
from .base import Fault, FaultKind, World, workload_evidence
from .catalogue import CuratedChange, FaultTag

MISSING = object()


# -- evidence helpers --------------------------------------------------------------------------
def _pods(world: World, ns: str, service: str) -> list[dict[str, Any]]:
    """The service's active pods (scheduled or not, running or not)."""
    return [p for p in world.cluster.store.list("Pod", ns)
            if (p["metadata"].get("labels") or {}).get("app") == service and pod_is_active(p)]


def _ready_pods(world: World, ns: str, service: str) -> int:
    up = world.cluster.network.node_up
    return sum(1 for p in _pods(world, ns, service) if pod_is_ready(p) and up.get(p["spec"].get("nodeName", ""), False))


def _running_configs(world: World, ns: str, service: str) -> list[dict[str, str]]:
    """The configuration every running container of the service was started with."""
    up = world.cluster.network.node_up
    return [c.ctx.config_data for c in world.cluster.kubelet.containers.values()
            if c.namespace == ns and c.service == service and c.state == "running" and c.ctx is not None
            and up.get(c.node, False)]


_PATH_TOKEN = re.compile(r"""\.?([^.\[\]]+)|\[(\d+)\]|\[["']([^"']+)["']\]""")


def parse_path(path: str) -> list[Any]:
    """``a.b[0]["c.d"]`` -> ``["a", "b", 0, "c.d"]`` (a dotted path with list indices and quoted keys)."""
    out: list[Any] = []
    pos = 0
    while pos < len(path):
        m = _PATH_TOKEN.match(path, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"cannot parse field path {path!r} at {path[pos:]!r}")
        name, index, quoted = m.groups()
        out.append(int(index) if index is not None else (quoted if quoted is not None else name))
        pos = m.end()
    return out


def resolve(obj: Any, path: list[Any]) -> Any:
    """The value at ``path`` inside ``obj``, or ``MISSING``."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(obj, list) or step >= len(obj):
                return MISSING
            obj = obj[step]
        else:
            if not isinstance(obj, dict) or step not in obj:
                return MISSING
            obj = obj[step]
    return obj


def _matches(actual: Any, bad: Optional[str]) -> bool:
    """Does a live value equal the tag's bad value? (``None`` = the bad state is "absent")."""
    if bad is None:
        return actual is MISSING
    if actual is MISSING or actual is None or isinstance(actual, (dict, list)):
        return False
    if isinstance(actual, bool):
        actual = str(actual).lower()
    return str(actual) == bad


# -- the families ------------------------------------------------------------------------------
class ChangeFault(FaultKind):
    """A curated change, committed and deployed by the orchestrator.

    Subclasses say how to recognise the faulty thing in the repository head (``in_head``) and in
    the live cluster (``live``); mitigation is "not live anywhere, and the service serves"."""

    family = "change"
    component_form = "service:<app>/<service>"
    arrives = "a curated change committed and deployed through the pipeline (build, then rollout)"
    repair = "revert the change through the pipeline (or deploy an earlier good ref)"

    # -- what the curated change says ------------------------------------------------------
    def curated(self, world: World, fault: Fault) -> CuratedChange:
        return world.curated(fault.app, fault.params["change"])

    def tag(self, world: World, fault: Fault) -> FaultTag:
        tag = self.curated(world, fault).fault
        if tag is None:
            raise ValueError(f"curated change {fault.params['change']!r} of {fault.app} has no fault: tag")
        return tag

    # -- the four operations ---------------------------------------------------------------
    def inject(self, world: World, fault: Fault) -> None:
        curated = self.curated(world, fault)
        tag = self.tag(world, fault)
        change = world.pipelines.commit_edits(fault.app, [(e.file, e.find, e.replace) for e in curated.edits],
                                              curated.message, curated.author)
        fault.change = change.id
        fault.component = f"service:{fault.app}/{tag.service}"
        fault.description = f"{self.name} in {fault.app}/{tag.service}: {curated.message}"
        fault.impact = self.symptoms_from(world, fault.app, tag.service)
        world.pipelines.deploy(fault.app, "HEAD", "orchestrator")

    def mitigated(self, world: World, fault: Fault) -> bool:
        return not self.live(world, fault) and self.serving(world, fault)

    def active(self, world: World, fault: Fault) -> bool:
        """A faulty change is active once a deploy containing it starts rolling out (its build
        queued and ran first, when builds take time)."""
        return world.pipelines.is_deployed(fault.app, fault.change)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The service's pod template and pods (what runs the faulty thing). Not its replica
        count: scaling a faulty service changes nothing a code or configuration fault reads."""
        return workload_evidence(world, fault.app, self.tag(world, fault).service, replicas=False)

    def cleanup(self, world: World, fault: Fault) -> None:
        """What the on-call human does at the end of the window: revert the change if it is
        still in the tree (a plain revert, or the inverse edit if later changes conflict)."""
        if not self.in_head(world, fault):
            return
        try:
            world.pipelines.revert(fault.app, fault.change or "", "orchestrator")
            return
        except PipelineError:
            pass
        curated = self.curated(world, fault)
        edits = []
        for e in curated.edits:
            if not e.replace.strip():
                continue  # a pure deletion has no anchor to put the text back at
            text = world.pipelines.head_file(fault.app, e.file)
            if apply_edit(text, e.replace, e.find) is not None:
                edits.append((e.file, e.replace, e.find))
        if edits:
            world.pipelines.commit_edits(fault.app, edits, f'Revert "{curated.message}"',
                                         "oncall-human <oncall@sremarathon.local>")
            world.pipelines.deploy(fault.app, "HEAD", "orchestrator")

    # -- what subclasses define ------------------------------------------------------------
    def live(self, world: World, fault: Fault) -> bool:
        """Is the faulty thing still live anywhere in the cluster?"""
        raise NotImplementedError

    def in_head(self, world: World, fault: Fault) -> bool:
        """Is the faulty thing still in the repository's head?"""
        raise NotImplementedError

    def serving(self, world: World, fault: Fault) -> bool:
        """The service answers again: at least one ready pod."""
        return _ready_pods(world, fault.app, self.tag(world, fault).service) >= 1


# -- code ---------------------------------------------------------------------------------------
class CodeFault(ChangeFault):
    """Faulty code, recognised by its ``signature`` (text present in the service's code exactly
    while the fault is in it). Mitigated once no active pod of the service — running, crash
    looping or pending — has an image whose artifact contains the signature, and the service has
    a ready pod. Repair: revert the change (or deploy an earlier good ref) through the pipeline."""

    judge = (
        "no active pod of the service runs an artifact containing the change's signature, and "
        "the service has a ready pod"
    )

    def signature(self, world: World, fault: Fault) -> str:
        tag = self.tag(world, fault)
        if tag.signature:
            return tag.signature
        return self.curated(world, fault).edits[0].replace.strip().splitlines()[0]

    def _files(self, world: World, fault: Fault) -> list[str]:
        return sorted({e.file for e in self.curated(world, fault).edits})

    def live(self, world: World, fault: Fault) -> bool:
        signature, files = self.signature(world, fault), self._files(world, fault)
        artifacts = world.cluster.artifacts
        for pod in _pods(world, fault.app, self.tag(world, fault).service):
            for container in pod["spec"].get("containers") or []:
                artifact = artifacts.by_image(container.get("image", ""))
                if artifact is not None and any(signature in artifact.files.get(f, "") for f in files):
                    return True
        return False

    def in_head(self, world: World, fault: Fault) -> bool:
        signature = self.signature(world, fault)
        return any(signature in world.pipelines.head_file(fault.app, f) for f in self._files(world, fault))


class CodeException(CodeFault):
    """A code change raises an exception on a request path.

    Effects: the requests that take the path fail with HTTP 500 and a Python traceback in the
    service's pod logs; the service's error ratio rises (ServiceHighErrorRate), and so does its
    callers'. Pods stay ready — restarting them changes nothing.
    Repair: revert the change through the pipeline (or deploy an earlier good ref)."""

    name = "code-exception"
    description = "a code change raises an exception on a request path"


class CodeLatency(CodeFault):
    """A code change adds latency: extra work or N+1 downstream calls per request.

    Effects: the service's p99 latency rises past its SLO (ServiceLatencySLOBurn), its CPU and
    the call rate into its dependencies grow, and callers' latency follows; slow enough, callers
    time out. Repair: revert the change through the pipeline."""

    name = "code-latency"
    description = "a code change adds latency or N+1 downstream calls"


class CodeCrashOnStart(CodeFault):
    """A code change makes the process exit during start-up (e.g. it reads a setting that is
    not deployed). The build passes: unit tests never run ``startup``.

    Effects: the new pods go CrashLoopBackOff with the traceback in their logs
    (KubePodCrashLooping), the rollout stalls at the surge pod (KubeDeploymentRolloutStuck after
    the progress deadline); the old pods keep serving, so users notice nothing until they are
    gone. Deleting the crashing pods brings back the same image. Repair: revert the change (or
    deploy an earlier good ref); the controller then scales the crashing ReplicaSet away."""

    name = "code-crash-on-start"
    description = "a code change crashes the service on start"


class CodeMemoryLeak(CodeFault):
    """A code change retains state per request that is never released.

    Effects: the pods' memory grows every minute (ContainerMemoryNearLimit), until the kernel
    OOM-kills them (KubeContainerOOMKilled, restarts); the pods of a service leak in step, so
    they tend to die together and requests fail while they restart. A restart only resets the
    clock. Repair: revert the change through the pipeline."""

    name = "code-memory-leak"
    description = "a code change leaks memory until the pods are OOM-killed"


class CodeRetryStorm(CodeFault):
    """A code change retries a downstream call too eagerly (no backoff, a wrong success test),
    multiplying the calls it sends.

    Effects: the callee's request rate and CPU jump by the retry factor; near its CPU limit its
    latency (and then every caller's) climbs. The change sits in the caller, the symptoms also
    in the callee and the callee's other callers.
    Repair: revert the change through the pipeline (scaling the callee only buys headroom)."""

    name = "code-retry-storm"
    description = "a code change retries downstream calls in a storm"
    repair = "revert the change through the pipeline (scaling the callee only buys headroom)"

    def symptoms_from(self, world: World, ns: str, service: str) -> set[tuple[str, str]]:
        out = super().symptoms_from(world, ns, service)
        for callee in world.apps[ns].services[service].calls:
            out |= super().symptoms_from(world, ns, callee)
        return out


class CodeContractBreak(CodeFault):
    """A code change alters the shape of a response (a renamed or restructured field); the
    service itself answers 200, its callers fail parsing the answer.

    Effects: errors and tracebacks (KeyError/TypeError) appear in the *callers* of the service,
    whose error ratio rises; the changed service looks healthy. Localise to the changed service
    (the callee), not to the callers that raise. Repair: revert the change through the pipeline."""

    name = "code-contract-break"
    description = "a code change breaks the response contract its callers rely on"

    def symptoms_from(self, world: World, ns: str, service: str) -> set[tuple[str, str]]:
        return {(ns, s) for s in world.apps[ns].callers_of(service)}



class CodeDependencyBump(CodeFault):
    """A routine-looking bump of a pinned third-party library (``requirements.txt`` and the
    vendored source together, as a dependency bot opens it) whose new major version changes a
    default the service relied on (``signature``: the new default, in the vendored module).
    The unit tests pass: they never take the path that depends on the old default.

    Effects: the requests that reach the library with the old assumption fail with the library's
    own exception (a traceback ending in the vendored module in the service's pod logs) or are
    misread: in the shop the storefront's cart page (``TypeError: moneyparse refuses float
    amount``), in the hotel the rate quotes of dates a day-first parser reads as another month
    ("check-out … is not after check-in", "stays are limited to … nights"), so only some dates
    fail. ServiceHighErrorRate on the service and its callers. Nothing in the service's own code
    changed, and benign dependency bumps ship around it; restarting changes nothing.
    Repair: revert the bump through the pipeline (or pin the old version back)."""

    name = "code-dependency-bump"
    description = "a dependency version bump changes a default the service relied on"
    repair = "revert the bump through the pipeline (or pin the old version back)"



class CodeSchemaMigration(CodeFault):
    """A code change writes its records in a new shape (``{"schema": 2, "posts": [...]}`` where
    a list was) and reads only the new one: no expand-then-contract.

    Effects: during the rollout the old pods fail on the records the new pods wrote (``TypeError:
    string indices must be integers``), and the new pods on every record written before
    (``TypeError: list indices must be integers or slices, not str``); once rolled out, every
    read of an old record fails (the service and its callers: ServiceHighErrorRate), while keys
    first written by the new version work — so a share of the data is now in the new shape.
    Reverting brings back code that cannot read that share: errors go on after the rollback.
    Restarting changes nothing. Repair: fix forward — deploy a version that reads both shapes
    (or revert and repair the records written in the new shape).
    Mitigated when no active pod runs the faulty reader (its ``signature``), the service has a
    ready pod, and its error ratio is below 1% (2-minute mean): the data the running code meets
    is the data it can read."""

    name = "code-schema-migration"
    description = "a change writes a new record shape that neither old pods nor its own reader of old records handle"
    repair = "fix forward: deploy a version that reads both shapes (or revert and repair the records in the new shape)"
    judge = (
        "no active pod of the service runs the faulty reader, its Service routes to a ready pod, "
        "and its error ratio is below 1% (2-minute mean)"
    )
    MAX_ERROR_RATIO = 0.01

    def mitigated(self, world: World, fault: Fault) -> bool:
        if not super().mitigated(world, fault):
            return False
        # Its Service must route to it: emptying the endpoints would move the failures into
        # the callers and leave the service's own numbers clean.
        ep = world.cluster.store.get("Endpoints", fault.app, self.tag(world, fault).service) or {}
        if not any(sub.get("addresses") for sub in ep.get("subsets") or []):
            return False
        # The service's own failures, not its callers': they only pass its errors on, and a
        # caller with little traffic keeps an old failure share in its estimate for long.
        window = world.cluster.metrics.window(fault.app, self.tag(world, fault).service, "error_ratio", 4)
        return not window or sum(window) / len(window) < self.MAX_ERROR_RATIO

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The service's template and pods (the code that reads), and the pods of the datastores
        it calls (a repair of the records, or their loss, comes through them)."""
        tag = self.tag(world, fault)
        app = world.apps[fault.app]
        out = workload_evidence(world, fault.app, tag.service, replicas=False)
        for ds in app.services[tag.service].calls:
            if app.services[ds].datastore is not None:
                out += workload_evidence(world, fault.app, ds, replicas=False)
        return out


# -- configuration ------------------------------------------------------------------------------
class ConfigFault(ChangeFault):
    """A bad configuration value (``key``/``value``; ``value: null`` means the key was removed)
    in ``config/<service>.yaml``, i.e. the service's ConfigMap. A ConfigMap change rolls the
    pods (the config-hash annotation). Mitigated once no running pod of the service has
    ``key == value`` (for a removed key: every running pod has the key again), and the service
    has a ready pod. Repair: revert the change through the pipeline (or an equivalent fix
    deployed through it)."""

    judge = (
        "no running pod of the service holds the bad configuration value (or lacks the "
        "removed key), and the service has a ready pod"
    )

    def _key(self, world: World, fault: Fault) -> tuple[str, Optional[str]]:
        tag = self.tag(world, fault)
        if not tag.key:
            raise ValueError(f"curated change {fault.params['change']!r}: a config-* fault needs `key`")
        return tag.key, tag.value

    def live(self, world: World, fault: Fault) -> bool:
        key, bad = self._key(world, fault)
        return any(_matches(config.get(key, MISSING), bad)
                   for config in _running_configs(world, fault.app, self.tag(world, fault).service))

    def in_head(self, world: World, fault: Fault) -> bool:
        key, bad = self._key(world, fault)
        text = world.pipelines.head_file(fault.app, f"config/{self.tag(world, fault).service}.yaml")
        try:
            data = yamlio.load(text) or {}
        except yaml.YAMLError:
            return True
        return _matches(data.get(key, MISSING) if isinstance(data, dict) else MISSING, bad)


class ConfigWrongEndpoint(ConfigFault):
    """Configuration points the service at a dependency that does not exist.

    Effects: every call to that dependency fails with "no such host"; the service's requests that
    need it fail (ServiceHighErrorRate on it and its callers). Repair: revert the change."""

    name = "config-wrong-endpoint"
    description = "configuration points a service at a dependency that does not exist"


class ConfigBadTimeout(ConfigFault):
    """A timeout set far below the dependency's latency.

    Effects: the service's downstream calls end in "deadline exceeded" (504); its error ratio and
    its callers' rise while the dependencies look healthy. Repair: revert the change."""

    name = "config-bad-timeout"
    description = "a timeout set far below the dependency's latency"


class ConfigFeatureFlag(ConfigFault):
    """A feature flag switched on that enables an expensive code path.

    Effects: the service's CPU jumps to its limit and its latency past its SLO
    (ServiceLatencySLOBurn); callers slow down or time out. Nothing crashes. Repair: revert the
    change (switch the flag off through the pipeline)."""

    name = "config-feature-flag"
    description = "a feature flag enables an expensive code path"
    repair = "revert the change (switch the flag off through the pipeline)"


class ConfigPoolSize(ConfigFault):
    """A connection-pool size set below what a request needs at once.

    Effects: requests that need more connections than the pool holds fail with "pool limit …
    reached, connection timed out" (HTTP 500 in the service, errors in its callers); smaller
    requests still pass, so the error ratio is partial. Repair: revert the change."""

    name = "config-pool-size"
    description = "a connection pool sized too small"


class ConfigEnvRemoved(ConfigFault):
    """A setting the code reads without a default is removed from the configuration
    (``value: null``).

    Effects: requests on the path fail with "missing configuration key" (HTTP 500 with a
    traceback), the service's and its callers' error ratio rises. Repair: revert the change so
    that the key is deployed again; mitigated when every running pod has the key."""

    name = "config-env-removed"
    description = "a configuration key the code needs was removed"



def _rolled_out(value: Any) -> bool:
    """Does a percentage flag's value enable its path for anyone? Absent or a share ≤ 0 is off;
    anything else (a share above zero, a value the code cannot parse) is not."""
    if value is MISSING or value is None:
        return False
    try:
        return float(str(value)) > 0
    except ValueError:
        return True


class ConfigPercentageRollout(ConfigFault):
    """A percentage feature flag (``key``, the share of users in percent) rolled out to a share
    of the users (``value``), enabling a code path that is broken: it shipped dark and was never
    exercised.

    Effects: the requests of the users in the rollout fail on that path (HTTP 500 with a
    traceback in the service's pod logs) and no one else's: a *partial* error ratio on the
    service and its callers (ServiceHighErrorRate), steady per user, that no pod, node or zone
    explains. Restarting or scaling changes nothing; turning the rollout down (10% instead of
    50%) only shrinks the share. Repair: revert the change, or set the share to 0 (through the
    pipeline, or in the ConfigMap followed by a rollout restart)."""

    name = "config-percentage-rollout"
    description = "a percentage feature-flag rollout enables a broken path for a share of users"
    repair = (
        "revert the change, or set the rollout share to 0 (through the pipeline, or in the "
        "ConfigMap followed by a rollout restart)"
    )
    judge = (
        "no running pod of the service has the flag rolled out to a share above 0, and the "
        "service has a ready pod"
    )

    def live(self, world: World, fault: Fault) -> bool:
        key, _ = self._key(world, fault)
        return any(_rolled_out(config.get(key, MISSING))
                   for config in _running_configs(world, fault.app, self.tag(world, fault).service))

    def in_head(self, world: World, fault: Fault) -> bool:
        key, _ = self._key(world, fault)
        text = world.pipelines.head_file(fault.app, f"config/{self.tag(world, fault).service}.yaml")
        try:
            data = yamlio.load(text) or {}
        except yaml.YAMLError:
            return True
        return _rolled_out(data.get(key, MISSING) if isinstance(data, dict) else MISSING)


# -- manifests ----------------------------------------------------------------------------------
class ManifestFault(ChangeFault):
    """A bad value in a manifest: ``object`` (Deployment or Service, named after the service),
    ``field`` (a dotted path such as ``spec.template.spec.containers[0].resources.limits.memory``)
    and ``value`` (the bad value). Mitigated once the live object's field differs from the value,
    every active pod of the service was created from a template without it (for
    ``spec.template.*`` fields), and the service serves: a ready pod for a Deployment, a ready
    endpoint for a Service. Repair: revert the change through the pipeline, or fix the field (in
    the manifest and redeploy, or on the live object)."""

    judge = (
        "the live object's field no longer has the bad value, every active pod was created "
        "from a template without it, and the service has a ready pod"
    )

    TEMPLATE = "spec.template."

    def _target(self, world: World, fault: Fault) -> tuple[str, str, list[Any], Optional[str]]:
        tag = self.tag(world, fault)
        if tag.object not in ("Deployment", "StatefulSet", "Service") or not tag.field:
            raise ValueError(f"curated change {fault.params['change']!r}: a manifest-* fault needs "
                             "`object: Deployment|StatefulSet|Service` and `field`")
        return tag.object, tag.service, parse_path(tag.field), tag.value

    def live(self, world: World, fault: Fault) -> bool:
        kind, name, path, bad = self._target(world, fault)
        obj = world.cluster.store.get(kind, fault.app, name)
        if obj is not None and _matches(resolve(obj, path), bad):
            return True
        field = self.tag(world, fault).field or ""
        if kind in ("Deployment", "StatefulSet") and field.startswith(self.TEMPLATE):
            pod_path = parse_path(field[len(self.TEMPLATE):])
            return any(_matches(resolve(p, pod_path), bad) for p in _pods(world, fault.app, name))
        return False

    def in_head(self, world: World, fault: Fault) -> bool:
        kind, name, path, bad = self._target(world, fault)
        doc = head_manifest(world, fault.app, kind, name)
        return doc is not None and _matches(resolve(doc, path), bad)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The manifest's object: the Service's spec, or the Deployment's template (and, for
        a replica count cut, its replicas) and pods."""
        kind, name, _, _ = self._target(world, fault)
        if kind == "Service":
            return [EvidenceRef("Service", fault.app, name, "spec")]
        field = self.tag(world, fault).field or ""
        return workload_evidence(world, fault.app, name, replicas=not field.startswith(self.TEMPLATE))

    def serving(self, world: World, fault: Fault) -> bool:
        kind, name, _, _ = self._target(world, fault)
        if kind != "Service":
            return super().serving(world, fault)
        if world.cluster.store.get("Service", fault.app, name) is None:
            return False
        ep = world.cluster.store.get("Endpoints", fault.app, name) or {}
        return any(s.get("addresses") for s in ep.get("subsets") or [])


class ManifestMemoryLimit(ManifestFault):
    """The container memory limit is cut below what the service uses.

    Effects: the new pods are OOM-killed as they warm up (KubeContainerOOMKilled, then
    KubePodCrashLooping) and the rollout stalls (KubeDeploymentRolloutStuck); old pods keep
    serving until they go. Restarting pods brings back the same limit. Repair: revert the change
    (or raise the limit in the manifest and redeploy)."""

    name = "manifest-memory-limit"
    description = "a container memory limit cut below the service's usage"
    repair = "revert the change (or raise the limit in the manifest and redeploy)"


class ManifestReadinessProbe(ManifestFault):
    """A typo in the readiness probe (path or port): the probe can never pass.

    Effects: the new pods run but never become ready (KubePodNotReady, "Readiness probe failed"
    events), so they never receive traffic and the rollout stalls (KubeDeploymentRolloutStuck);
    should the old pods go, the service has no endpoints. Repair: revert the change (or fix the
    probe in the manifest and redeploy)."""

    name = "manifest-readiness-probe"
    description = "a readiness probe typo keeps new pods unready"
    repair = "revert the change (or fix the probe in the manifest and redeploy)"


class ManifestServiceSelector(ManifestFault):
    """The Service's selector no longer matches the service's pods (a typo, or a label the pods
    do not carry).

    Effects: the Service's Endpoints empty at once; every call to the service fails with "no
    healthy upstream" (ServiceHighErrorRate on it and its callers) while its pods look perfectly
    healthy. Repair: revert the change (or fix the selector and redeploy)."""

    name = "manifest-service-selector"
    description = "a Service selector that matches no pods"
    repair = "revert the change (or fix the selector and redeploy)"


class ManifestTargetPort(ManifestFault):
    """The Service's targetPort no longer matches the container's port.

    Effects: endpoints exist but connections are refused; every call to the service fails
    (ServiceHighErrorRate on it and its callers) while its pods look healthy. Repair: revert the
    change (or fix the port and redeploy)."""

    name = "manifest-target-port"
    description = "a Service targetPort that matches no container port"
    repair = "revert the change (or fix the targetPort and redeploy)"


class ManifestReplicasCut(ManifestFault):
    """The Deployment's replica count is cut (to zero, or far below the load).

    Effects: the service's ready pods drop (to none: every call to it fails with "no healthy
    upstream", ServiceHighErrorRate on it and its callers). Restarting pods does nothing; scaling
    by hand holds only until the next deploy re-applies the manifest. Repair: revert the change
    (or restore the count in the manifest and redeploy)."""

    name = "manifest-replicas-cut"
    description = "a Deployment's replicas cut below what the service needs"
    repair = (
        "revert the change (or restore the count in the manifest and redeploy); scaling by "
        "hand holds only until the next deploy"
    )


class ManifestZoneAffinity(ManifestFault):
    """A required node affinity pins every replica of the service into one zone.

    Effects: the rollout moves all pods into that zone (pod placement; the zone spread constraint
    is violated), callers in the other zone pay a cross-zone hop, and a failure of that zone
    takes the service down completely. Latent until the zone degrades. Repair: revert the change
    (or drop the affinity in the manifest and redeploy)."""

    name = "manifest-zone-affinity"
    description = "node affinity pins all replicas of a service into one zone"
    repair = "revert the change (or drop the affinity in the manifest and redeploy)"



class ManifestImageTag(ManifestFault):
    """The Deployment's image is pinned to a tag that was never built or pushed (a release tag
    typed by hand, a tag from another branch).

    Effects: the new pods cannot pull their image (``ErrImagePull``, then ``ImagePullBackOff``;
    "Failed to pull image … not found" events) and never start, so the rollout stalls at the
    surge pod (KubePodCrashLooping on the waiting pod, KubeDeploymentRolloutStuck after the
    progress deadline); the old pods keep serving, so users notice nothing until they go.
    Deleting the pods, or retagging the image with another guessed tag, changes nothing.
    Repair: revert the change (or ``kubectl rollout undo``, or set an image that exists)."""

    name = "manifest-image-tag"
    description = "a Deployment's image pinned to a tag that does not exist"
    repair = "revert the change (or `kubectl rollout undo`, or set an image that exists)"
    judge = (
        "no live template or active pod of the service names the bad tag or any other image "
        "that cannot be pulled, and the service has a ready pod"
    )

    def live(self, world: World, fault: Fault) -> bool:
        """The bad tag, or any image the registry does not hold: replacing the bad tag with
        another tag that does not exist is not a repair."""
        return super().live(world, fault) or self._unpullable(world, fault)

    def _unpullable(self, world: World, fault: Fault) -> bool:
        name = self.tag(world, fault).service
        artifacts = world.cluster.artifacts
        own = f"{fault.app}/"  # the app's own images (stock datastore images are not built here)

        def bad(containers: list[dict[str, Any]]) -> bool:
            return any(c.get("image", "").startswith(own) and artifacts.by_image(c["image"]) is None
                       for c in containers)

        dep = world.cluster.store.get("Deployment", fault.app, name)
        if dep is not None and bad(dep["spec"]["template"]["spec"].get("containers") or []):
            return True
        return any(bad(p["spec"].get("containers") or []) for p in _pods(world, fault.app, name))




def head_manifest(world: World, app: str, kind: str, name: str) -> Optional[dict[str, Any]]:
    """The object ``kind``/``name`` as the app's HEAD manifests define it (None: none does)."""
    for p in sorted(world.pipelines.apps[app].repo.path.glob("manifests/*.yaml")):
        try:
            docs = yamlio.load_all(world.pipelines.head_file(app, str(Path("manifests") / p.name)))
        except yaml.YAMLError:
            continue
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == kind and (doc.get("metadata") or {}).get("name") == name:
                return doc
    return None


@functools.lru_cache(maxsize=128)
def _manifest_docs(text: str) -> tuple[Any, ...]:
    """A manifest file's documents, parsed once per distinct content (the judge reads the
    deployed revision every tick while the fault is active). Read only."""
    try:
        return tuple(yamlio.load_all(text))
    except yaml.YAMLError:
        return ()


@dataclass
class _Hotfix:
    """Where a hotfix-undone fault is in its story (kept by the kind, per fault)."""

    good: Any  # the field's value before the bad change, what the human puts back live
    phase: str = "deploying"  # deploying -> hotfixed -> triggered
    trigger_at: Optional[datetime] = None
    trigger_change: Optional[str] = None


class ManifestHotfixUndone(ManifestFault):
    """A bad value in a Deployment manifest (``object``/``field``/``value``, as for the other
    manifest kinds) that a human fixed *live*, outside the pipeline: the change is deployed and
    the on-call engineer patches the live Deployment back at once (``kubectl set resources``;
    the change-cause annotation says so) but never fixes the repository. The pipeline applies
    only what a deploy changes, so the live fix holds — until the next routine change of the
    service (``trigger``, a benign curated change, shipped ``TRIGGER_DELAY`` later) re-renders
    the Deployment from the repository and silently brings the bad value back. The fault is
    active from that rollout on; its root cause is the earlier change (``change:<id>``), not the
    routine one that re-applied it.

    Effects: as for the bad value itself (a memory limit below the working set: the new pods are
    OOM-killed as they warm up, KubeContainerOOMKilled, KubePodCrashLooping, the rollout stalls),
    starting right after an innocuous deploy. Rolling the routine change back re-applies the same
    bad value; repeating the human's kubectl fix holds only until the next deploy and does not
    count. Repair: put the fix in the repository (revert the earlier change, or commit the good
    value) and deploy it."""

    name = "manifest-hotfix-undone"
    description = "a live hotfix made outside the pipeline, silently undone by the next routine deploy"
    arrives = (
        "a curated change deployed through the pipeline and hot-fixed live at once by a human "
        "(kubectl, not the repository); the next routine deploy of the service re-applies it"
    )
    repair = "put the fix in the repository (revert the earlier change, or commit the good value) and deploy it"
    judge = (
        "the live Deployment and every active pod are free of the bad value, the deployed "
        "revision of the manifest no longer carries it (a kubectl fix alone does not count), and "
        "the service has a ready pod"
    )

    #: How long after the hotfix the service's next routine change ships.
    TRIGGER_DELAY = timedelta(minutes=20)
    HOTFIX_CAUSE = "hotfix by on-call: {field} back to {good} (live only; repository to follow)"

    def __init__(self) -> None:
        self._story: dict[str, _Hotfix] = {}

    def inject(self, world: World, fault: Fault) -> None:
        kind, name, path, _ = self._target(world, fault)
        live = world.cluster.store.get(kind, fault.app, name)
        self._story[fault.id] = _Hotfix(good=copy.deepcopy(resolve(live, path)) if live is not None else MISSING)
        super().inject(world, fault)

    def active(self, world: World, fault: Fault) -> bool:
        """Drives the story, called every tick until the fault is active (after the pipeline
        applied what landed, before the controllers act): the bad change lands and is
        hot-fixed in the same moment (no pod ever runs it), the routine change ships a while
        later, and its rollout — or any other deploy that re-applies the Deployment — makes the
        fault active."""
        story = self._story.get(fault.id)
        if story is None:
            return False
        now = world.cluster.store.clock()
        if story.phase == "deploying":
            if world.pipelines.is_deployed(fault.app, fault.change):
                self._hotfix(world, fault, story)
                story.phase, story.trigger_at = "hotfixed", now + self.TRIGGER_DELAY
            return False
        if self._bad_live(world, fault):
            return True  # a deploy re-applied the repository's value
        if story.phase == "hotfixed" and story.trigger_at is not None and now >= story.trigger_at:
            story.phase = "triggered"
            trigger = self.tag(world, fault).trigger
            if trigger:
                curated = world.curated(fault.app, trigger)
                try:
                    change = world.pipelines.commit_edits(fault.app, [(e.file, e.find, e.replace) for e in curated.edits],
                                                          curated.message, curated.author)
                except PipelineError:
                    return False  # someone changed those lines meanwhile; the next deploy will do
                story.trigger_change = change.id
                world.pipelines.deploy(fault.app, "HEAD", "orchestrator")
        return False

    def _hotfix(self, world: World, fault: Fault, story: _Hotfix) -> None:
        kind, name, path, _ = self._target(world, fault)
        live = world.cluster.store.get(kind, fault.app, name)
        if live is None or story.good is MISSING:
            return
        fixed = copy.deepcopy(live)
        parent = resolve(fixed, path[:-1])
        if not isinstance(parent, (dict, list)):
            return
        parent[path[-1]] = copy.deepcopy(story.good)
        annotations = fixed["metadata"].setdefault("annotations", {})
        annotations["kubernetes.io/change-cause"] = self.HOTFIX_CAUSE.format(
            field=self.tag(world, fault).field, good=story.good)
        world.cluster.store.replace(fixed, check_rv=False)

    def _bad_live(self, world: World, fault: Fault) -> bool:
        return super().live(world, fault)

    def _bad_deployed(self, world: World, fault: Fault) -> bool:
        """Does the revision the pipeline last deployed still carry the bad value? (What the
        next deploy of the service would apply again.)"""
        kind, name, path, bad = self._target(world, fault)
        for rel in sorted(f for f in world.pipelines.deployed_files(fault.app) if f.startswith("manifests/")):
            for doc in _manifest_docs(world.pipelines.deployed_file(fault.app, rel)):
                if isinstance(doc, dict) and doc.get("kind") == kind and (doc.get("metadata") or {}).get("name") == name:
                    return _matches(resolve(doc, path), bad)
        return False

    def live(self, world: World, fault: Fault) -> bool:
        return self._bad_live(world, fault) or self._bad_deployed(world, fault)

    def cleanup(self, world: World, fault: Fault) -> None:
        self._story.pop(fault.id, None)
        super().cleanup(world, fault)


# -- storage --------------------------------------------------------------------------------------
class ManifestClaimUnbindable(ManifestFault):
    """The Deployment starts mounting a new PersistentVolumeClaim that cannot bind: its
    ``storageClassName`` names a class this cluster does not have (one that exists in another
    environment), so no volume is provisioned.

    Effects: the claim stays Pending (a ``ProvisioningFailed`` event: ``storageclass.storage.k8s.io
    "…" not found``); the rolled pod stays Pending (FailedScheduling: ``pod has unbound immediate
    PersistentVolumeClaims``, KubePodPending) and the rollout stalls (KubeDeploymentRolloutStuck)
    with the old pods serving at the capacity the surge budget left. Restarting or deleting the
    pods brings back the same claim. A claim's class cannot be changed in place (its spec is
    immutable). Repair: revert the change (or mount a claim of an existing class in the manifest
    and redeploy)."""

    name = "manifest-claim-unbindable"
    description = "a new volume claim of a storage class the cluster lacks keeps the rolled pods Pending"
    repair = "revert the change (or mount a claim of an existing class in the manifest and redeploy)"


CHANGE_KINDS: tuple[type[ChangeFault], ...] = (
    CodeException, CodeLatency, CodeCrashOnStart, CodeMemoryLeak, CodeRetryStorm, CodeContractBreak,
    CodeDependencyBump, CodeSchemaMigration,
    ConfigBadTimeout, ConfigWrongEndpoint, ConfigFeatureFlag, ConfigPoolSize, ConfigEnvRemoved,
    ConfigPercentageRollout,
    ManifestMemoryLimit, ManifestReadinessProbe, ManifestServiceSelector, ManifestTargetPort, ManifestReplicasCut,
    ManifestZoneAffinity, ManifestImageTag, ManifestHotfixUndone,
    ManifestClaimUnbindable,
)
