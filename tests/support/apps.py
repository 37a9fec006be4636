"""What the tests of the applications and their catalogues share: the faulty-change kinds a
catalogue covers, what each pages, and an app's source as its pipeline's repository holds it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any, Optional

from pytest_sremarathon.faults.catalogue import CuratedChange
from pytest_sremarathon.faults.change import parse_path, resolve
from pytest_sremarathon.pipeline.repo import REPO_FILES
from support.twins import AppTwin

CODE_KINDS = {"code-exception", "code-latency", "code-crash-on-start", "code-memory-leak", "code-retry-storm",
              "code-contract-break", "code-dependency-bump", "code-schema-migration"}
CONFIG_KINDS = {"config-bad-timeout", "config-wrong-endpoint", "config-feature-flag", "config-pool-size",
                "config-env-removed", "config-percentage-rollout"}
MANIFEST_KINDS = {"manifest-memory-limit", "manifest-readiness-probe", "manifest-service-selector",
                  "manifest-target-port", "manifest-replicas-cut", "manifest-zone-affinity", "manifest-image-tag",
                  "manifest-hotfix-undone", "manifest-claim-unbindable"}
# Change kinds of faults/runtime.py (init containers, probes); the hotel curates them.
RUNTIME_KINDS = {"init-container-failing", "liveness-under-load"}

# Change kinds an app does not curate, and why (another app's catalogue has each; the tests check).
NOT_CURATED: dict[str, dict[str, str]] = {
    "hotel": {"code-schema-migration": "no hotel change rewrites a record layout yet (social's post-storage has it)",
              "manifest-claim-unbindable": "no hotel service mounts a claim of its own (the shop's recommendation and "
                                           "social's media-upload do)"},
    "social": {"code-dependency-bump": "the social services vendor no library a bump could change (the hotel's "
                                       "dateparse and the shop's moneyparse have it)"},
    "shop": {"code-schema-migration": "the shop's cart lines are taken by other changes (social's post-storage has it)"},
}

# What an on-call engineer gets paged with, per fault kind (any one of these is enough).
ERRORS, LATENCY = "ServiceHighErrorRate", "ServiceLatencySLOBurn"
NOT_SERVING = {"KubePodNotReady", "KubeDeploymentRolloutStuck", "KubeDeploymentReplicasMismatch",
               "KubeStatefulSetReplicasMismatch"}
EXPECTED_ALERTS: dict[str, set[str]] = {
    "code-exception": {ERRORS},
    "code-latency": {LATENCY, ERRORS},  # slow enough to time out its callers at the peak
    "code-crash-on-start": {"KubePodCrashLooping"},
    "code-memory-leak": {"KubeContainerOOMKilled"},
    "code-retry-storm": {LATENCY, ERRORS},
    "code-contract-break": {ERRORS},
    "code-dependency-bump": {ERRORS},  # the requests that reach the library with the old default fail
    "code-schema-migration": {ERRORS},  # every read of a record in the old layout fails
    "config-bad-timeout": {ERRORS},
    "config-wrong-endpoint": {ERRORS} | NOT_SERVING,  # a readiness check may catch it first
    "config-feature-flag": {LATENCY, ERRORS},
    "config-pool-size": {ERRORS},  # pages that need more connections than the pool holds fail
    "config-env-removed": {ERRORS, "KubePodCrashLooping"} | NOT_SERVING,
    "config-percentage-rollout": {ERRORS},  # the users in the rollout fail, and no one else
    "manifest-memory-limit": {"KubeContainerOOMKilled"},
    "manifest-readiness-probe": NOT_SERVING,
    "manifest-service-selector": {ERRORS},
    "manifest-target-port": {ERRORS},
    "manifest-replicas-cut": {ERRORS},
    "manifest-zone-affinity": {"KubePodPending", "KubeDeploymentRolloutStuck"},
    # the surge pod waits on a pull that never succeeds; the old pods keep serving
    "manifest-image-tag": {"KubePodCrashLooping", "KubeDeploymentRolloutStuck"},
    # once the routine deploy re-applies the bad limit: as for the memory limit itself
    "manifest-hotfix-undone": {"KubeContainerOOMKilled", "KubePodCrashLooping"},
    # the rolled pod waits on a claim of a class the cluster lacks; the old pods keep serving
    "manifest-claim-unbindable": {"KubePodPending", "KubeDeploymentRolloutStuck"},
    # the surge pod never gets past its init container; the old pods keep serving
    "init-container-failing": NOT_SERVING,
    # liveness kills of the overloaded pods, and the errors and latency of the cascade
    "liveness-under-load": {"KubePodCrashLooping", ERRORS, LATENCY},
}
# Injected kinds the apps' tests drive by their twin knob (no curated change).
DNS_DEGRADED_ALERTS = {ERRORS}  # a share of the callers' downstream calls fail after their deadline


def signature_file(change: CuratedChange) -> Optional[str]:
    """The file a code change's signature is in once applied: the service's own module, or for a
    dependency bump the vendored library's (never ``requirements.txt``, which only pins it)."""
    tag = change.fault
    if tag is None or not tag.signature:
        return None
    files = [e.file for e in change.edits if tag.signature in e.replace]
    assert len(set(files)) == 1, f"{change.id}: the signature is in {files or 'no edit'}"
    return files[0]


def fix_forward(change: CuratedChange) -> list[tuple[str, str, str]]:
    """A schema migration's documented repair on top of its revert: the new layout again, with
    a reader of both layouts (what an engineer would commit)."""
    tag = change.fault
    assert tag is not None and tag.kind == "code-schema-migration" and tag.signature
    edits = []
    for e in change.edits:
        replace = e.replace
        if tag.signature in replace:
            replace = replace.replace('bucket["posts"]', '(bucket["posts"] if isinstance(bucket, dict) else bucket)')
            assert tag.signature not in replace, f"{change.id}: no known fix forward for its reader"
        edits.append((e.file, e.find, replace))
    return edits


def ship_hotfixed_then_trigger(twin: AppTwin, ns: str, change: CuratedChange, catalogue: list[CuratedChange],
                               paged: Callable[[], bool], quiet_ticks: int = 40) -> str:
    """A hotfix-undone change's story (cf. ManifestHotfixUndone.active): the change is deployed
    and the on-call human patches the live Deployment back before any pod runs it; twenty quiet
    minutes later (``quiet_ticks``: no pod runs the bad value, nothing ``paged``) the service's
    routine change (its ``trigger``) ships, and its deploy re-renders the Deployment from the
    repository, bad value and all. Returns the id of the earlier change, the root cause."""
    tag = change.fault
    assert tag is not None and tag.object == "Deployment" and tag.field and tag.value and tag.trigger
    path = parse_path(tag.field)
    good = resolve(twin.store.get("Deployment", ns, tag.service), path)
    assert str(good) != tag.value
    shipped = twin.pipelines.commit_edits(ns, [(e.file, e.find, e.replace) for e in change.edits], change.message,
                                          change.author)
    twin.pipelines.deploy(ns, "HEAD", "orchestrator")
    live = twin.store.get("Deployment", ns, tag.service)
    assert live is not None and str(resolve(live, path)) == tag.value, "the deploy did not apply the change"
    fixed = copy.deepcopy(live)
    resolve(fixed, path[:-1])[path[-1]] = good  # kubectl set resources, live only
    fixed["metadata"].setdefault("annotations", {})["kubernetes.io/change-cause"] = "hotfix by on-call (live only)"
    twin.store.replace(fixed, check_rv=False)
    pod_path = parse_path(tag.field.removeprefix("spec.template."))
    for _ in range(quiet_ticks):
        twin.tick()
        assert all(str(resolve(p, pod_path)) != tag.value for p in twin.active_pods(ns, tag.service)), \
            "a pod runs the hot-fixed value"
        assert not paged(), "the hot-fixed change paged"
    assert tag.value in twin.pipelines.deployed_file(ns, f"manifests/{tag.service}.yaml"), "only the live object is fixed"
    trigger = next(c for c in catalogue if c.id == tag.trigger)
    twin.pipelines.commit_edits(ns, [(e.file, e.find, e.replace) for e in trigger.edits], trigger.message,
                                trigger.author)
    twin.pipelines.deploy(ns, "HEAD", "orchestrator")
    assert str(resolve(twin.store.get("Deployment", ns, tag.service), path)) == tag.value, \
        "the routine deploy did not re-apply the repository's value"
    return shipped.id


def patch_serial_resolver(twin: AppTwin, ns: str, services: set[str]) -> None:
    """DNS degradation's documented repair, as ``kubectl patch``: the dnsConfig option
    single-request-reopen in each calling deployment's pod template (its pods are recreated)."""
    for svc in sorted(services):
        dep = copy.deepcopy(twin.store.get("Deployment", ns, svc))
        assert dep is not None, svc
        dep["spec"]["template"]["spec"]["dnsConfig"] = {"options": [{"name": "single-request-reopen"}]}
        twin.store.replace(dep, check_rv=False)


def source_files(root: Path) -> dict[str, str]:
    """The app template's source (its ``REPO_FILES`` directories, without bytecode), path ->
    text, as the pipeline imports it into the app's repository (cf. GitRepo.files_at)."""
    return {str(p.relative_to(root)): p.read_text() for d in REPO_FILES if (root / d).is_dir()
            for p in sorted((root / d).rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            and p.suffix != ".pyc"}


def service_manifest(docs: list[dict[str, Any]], svc: str, datastore: Optional[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A service's workload and its Service, checked for the shape the originals have: a
    persistent datastore (redis with its append-only file, mongo) is a StatefulSet whose pods
    each mount a claim of a template, governed by a headless Service beside the one its callers
    use; a memcached cache (it keeps nothing) and every code service are Deployments."""
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] != "Secret"}
    if datastore is not None and not datastore.startswith("memcached"):
        assert set(by) == {("StatefulSet", svc), ("Service", svc), ("Service", f"{svc}-headless")}, svc
        sts, headless = by[("StatefulSet", svc)], by[("Service", f"{svc}-headless")]
        assert sts["spec"]["serviceName"] == f"{svc}-headless" and headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["selector"] == {"app": svc}
        claim = sts["spec"]["volumeClaimTemplates"][0]
        assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and claim["spec"]["resources"]["requests"]["storage"]
        mounts = sts["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        assert [m["name"] for m in mounts] == [claim["metadata"]["name"]], svc
        return sts, by[("Service", svc)]
    assert set(by) == {("Deployment", svc), ("Service", svc)}, svc
    return by[("Deployment", svc)], by[("Service", svc)]
