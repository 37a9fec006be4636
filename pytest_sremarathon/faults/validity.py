"""Faults of time-bound trust: a node whose clock is wrong, a credential past its expiry.

Both break calls that pass every other check: the network delivers them, the handler code is
fine, and the callee refuses them because a timestamp (a token's issue time, a certificate's
``notAfter``) is outside what its clock accepts.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

from .. import yamlio
from ..k8s.store import iso
from ..pipeline.service import PipelineError
from ..provenance import EvidenceRef
from ..runtime.credentials import credential_env, read_credential
from .base import Fault, FaultKind, World, node_evidence, workload_evidence
from .dependency import running_containers
from .infrastructure import drained, impact_on_nodes, rollout_restart, services_have_ready_pods, uncordon

BusyKey = tuple[str, str]


class ClockSkew(FaultKind):
    """A node's clock drifts far from true time (its chrony/NTP daemon stopped, then the VM was
    suspended and resumed by the host; ``params.skew_seconds``, ahead if positive). Every call
    between pods carries a short-lived signed token (twin/clocks.py: 5 minutes, 60 s leeway):
    tokens issued on the node are refused elsewhere, and tokens from elsewhere are refused on it.

    Effects: only the requests served by or sent from pods on that node fail, with HTTP 401
    ("token has invalid claims: token used before issued" or "… token is expired") in the callee
    pods' logs and the callers' errors; ServiceHighErrorRate on the services with pods there and
    their callers, a partial error ratio that follows the pods on that node; ``kubectl exec …
    date`` in a pod on it shows the wrong time. Restarting the pods in place changes nothing:
    the node's clock is still wrong.
    Repair: cordon the node and drain it (the pods move to nodes whose clocks are right).
    Cleanup: the node's clock is stepped back (chrony restarted) and the node uncordoned."""

    name = "clock-skew"
    family = "infrastructure"
    description = "a node's clock drifts; tokens signed or checked on it are refused"
    component_form = "node:<node>"
    repair = "cordon the node and drain it (kubectl cordon/drain)"
    judge = "the node is cordoned and no active application pod is bound to it"
    #: How far the clock is off when the fault is found (seconds; a suspended VM's clock stays
    #: where it was, one with a bad NTP source runs ahead), drawn per fault.
    SKEWS = (-1800, -900, 900, 1800)

    @staticmethod
    def choose(rng: random.Random, targets: Any, free: Callable[[BusyKey], bool]
               ) -> Optional[tuple[str, dict[str, Any], list[BusyKey]]]:
        """One node of a zone no other node or zone fault impairs (the schedule's rule for
        node kinds), so draining it leaves a healthy zone to move to."""
        nodes = [n for n, z in targets.node_zone.items()
                 if free(("node", n)) and free(("zone", z)) and targets.others_healthy(z, free)]
        if not nodes:
            return None
        node = rng.choice(nodes)
        return ("cluster", {"node": node, "skew_seconds": rng.choice(ClockSkew.SKEWS)},
                [("node", node), ("impaired", targets.node_zone[node])])

    def inject(self, world: World, fault: Fault) -> None:
        node = fault.params["node"]
        skew = float(fault.params.get("skew_seconds", 900))
        world.cluster.network.clock_skew[node] = skew
        zone = world.cluster.network.node_zone.get(node, "")
        fault.component = f"node:{node}"
        fault.nodes = {node}
        fault.zones = {zone}
        fault.description = f"the clock of {node} ({zone}) is {abs(skew) / 60:.0f} min {'ahead' if skew > 0 else 'behind'}"
        fault.impact = impact_on_nodes(self, world, {node})

    def mitigated(self, world: World, fault: Fault) -> bool:
        return drained(world, {fault.params["node"]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence({fault.params["node"]})

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.clock_skew.pop(fault.params["node"], None)
        uncordon(world, fault.params["node"])


# -- secret-expiry ------------------------------------------------------------------------------------
#: How long a renewed credential must still be valid for the judge to call it renewed (a key that
#: expires again within the hour is not a repair).
RENEWED_FOR = timedelta(hours=1)


def _credential_ref(world: World, ns: str, service: str, env_name: str) -> Optional[tuple[str, str]]:
    """(Secret, key) the service's pod template takes ``env_name`` from, if it does."""
    dep = world.cluster.store.get("Deployment", ns, service)
    for c in ((dep or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []):
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if env.get("name") == env_name and ref:
                return ref["name"], ref["key"]
    return None


def _secret_value(secret: Optional[dict[str, Any]], key: str) -> Optional[str]:
    if secret is None:
        return None
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    raw = (secret.get("data") or {}).get(key)
    try:
        return base64.b64decode(str(raw)).decode() if raw is not None else None
    except (binascii.Error, UnicodeDecodeError):
        return None


def _valid_until(text: Optional[str], t: datetime) -> bool:
    """Does the credential ``text`` hold a key valid at ``t``?"""
    if text is None:
        return False
    key_id, expires = read_credential(text)
    return bool(key_id) and expires is not None and expires > t


class SecretExpiry(FaultKind):
    """The API key a service presents to a third-party API expires: it was issued for 180 days
    in the provider's dashboard and no rotation was ever set up for it. The key lives in a
    Secret (``credentials.json``: ``key_id``, ``issued_at``, ``expires_at``) that the service's
    pods read into their environment when they start (``<EXTERNAL>_CREDENTIAL``).

    Effects: from the expiry on, every call to the provider is refused with HTTP 401
    ("api_key_expired: Expired API Key provided: rk_live_…"), so the service's requests that
    need it fail with that error in its pod logs (ServiceHighErrorRate on it and its callers)
    while the provider's status is fine and nothing was deployed. ``kubectl get secret … -o
    jsonpath='{.data.credentials\\.json}' | base64 -d`` shows ``expires_at`` in the past.
    Restarting the pods reads the same expired key again; the app's queue-on-failure fallback
    only hides the failures.
    Repair: renew the credential (a new key with a later ``expires_at``) in the Secret and restart
    the pods that read it (``kubectl rollout restart deployment/<service>``)."""

    name = "secret-expiry"
    family = "dependency"
    description = "an API credential in a Secret expires; the provider refuses every call with 401"
    component_form = "external:<name>"
    repair = ("renew the credential in its Secret (a new key, a later expires_at) and restart the pods "
              "that read it (kubectl rollout restart deployment/<service>)")
    judge = ("the Secret holds a credential valid for at least another hour, every running pod of the "
             "services using the API started with a valid one, and each has a ready pod")

    @staticmethod
    def choose(rng: random.Random, targets: Any, free: Callable[[BusyKey], bool]
               ) -> Optional[tuple[str, dict[str, Any], list[BusyKey]]]:
        """An external API of an app whose users hold a credential Secret (the busy key is the
        external's, which its outage shares: one fault at a time per API)."""
        pool = [(app.namespace, name) for app in targets.apps for name, ext in sorted(app.externals.items())
                if free(("external", name)) and _declares_credential(app.root, ext.used_by, name)]
        if not pool:
            return None
        ns, name = rng.choice(pool)
        return ns, {"external": name}, [("external", name)]

    def _users(self, world: World, fault: Fault) -> list[tuple[str, str, str]]:
        """(service, Secret, key) of each service that presents a credential for the API."""
        ns, name = fault.app, fault.params["external"]
        out = []
        for svc in world.apps[ns].externals[name].used_by:
            ref = _credential_ref(world, ns, svc, credential_env(name))
            if ref is not None:
                out.append((svc, *ref))
        return out

    def inject(self, world: World, fault: Fault) -> None:
        ns, name = fault.app, fault.params["external"]
        if not world.cluster.network.credentials_checked:
            raise PipelineError(501, f"an expiring credential for {name} cannot be injected on this cluster (its "
                                     "third-party calls check no credential); the fault is skipped and recorded")
        users = self._users(world, fault)
        if not users:
            raise ValueError(f"no service of {ns} takes a credential for {name} from a Secret")
        now = world.cluster.store.clock()
        expired = iso(now)
        for svc, secret_name, key in users:
            secret = world.cluster.store.get("Secret", ns, secret_name)
            text = _secret_value(secret, key)
            if secret is None or text is None:
                raise ValueError(f"secret {ns}/{secret_name} has no {key}")
            doc = json.loads(text)
            # The key was issued with this expiry long ago: the Secret, and the copies the running
            # pods read at their start, carry it (the twin writes it now that the run reached it).
            doc["issued_at"] = iso(now - timedelta(days=180))
            doc["expires_at"] = expired
            new = json.dumps(doc, separators=(", ", ": "))
            secret.setdefault("data", {})[key] = base64.b64encode(new.encode()).decode()
            secret.pop("stringData", None)
            world.cluster.store.touch(secret)
            for c in running_containers(world, ns, svc):
                assert c.ctx is not None
                if credential_env(name) in c.ctx.config_data:
                    c.ctx.config_data[credential_env(name)] = new
        fault.component = f"external:{name}"
        fault.description = (f"the API key {', '.join(sorted({s for _, s, _ in users}))} gives "
                             f"{', '.join(s for s, _, _ in users)} for {name} expired at {expired}")
        fault.impact = {k for svc, _, _ in users for k in self.symptoms_from(world, ns, svc)}

    def mitigated(self, world: World, fault: Fault) -> bool:
        ns, name = fault.app, fault.params["external"]
        users = self._users(world, fault)
        if not users:
            return False
        good = world.cluster.store.clock() + RENEWED_FOR
        env_name = credential_env(name)
        for svc, secret_name, key in users:
            if not _valid_until(_secret_value(world.cluster.store.get("Secret", ns, secret_name), key), good):
                return False
            running = running_containers(world, ns, svc)
            if not running or not all(_valid_until(c.ctx.config_data.get(env_name), good) for c in running if c.ctx):
                return False
            if not services_have_ready_pods(world, {(ns, svc)}):
                return False
        return True

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The Secrets (the renewal) and the users' templates and pods (the restart that reads it)."""
        out: list[EvidenceRef] = []
        for svc, secret_name, _ in self._users(world, fault):
            out.append(EvidenceRef("Secret", fault.app, secret_name, "data"))
            out += workload_evidence(world, fault.app, svc, replicas=False)
        return out

    def cleanup(self, world: World, fault: Fault) -> None:
        """The on-call human rolls a new key in the provider's dashboard, puts it in the Secret
        and restarts the services."""
        if self.mitigated(world, fault):
            return
        ns = fault.app
        now = world.cluster.store.clock()
        for svc, secret_name, key in self._users(world, fault):
            secret = world.cluster.store.get("Secret", ns, secret_name)
            text = _secret_value(secret, key)
            if secret is None or text is None:
                continue
            doc = json.loads(text)
            if not _valid_until(text, now + RENEWED_FOR):
                suffix = hashlib.sha256(f"renew:{fault.id}:{doc.get('key_id')}".encode()).hexdigest()[:4]
                doc["key_id"] = str(doc.get("key_id", "rk_live_"))[:-4] + suffix
                doc["api_key"] = doc["key_id"] + hashlib.sha256(doc["key_id"].encode()).hexdigest()[:20]
                doc["issued_at"], doc["expires_at"] = iso(now), iso(now + timedelta(days=180))
                secret.setdefault("data", {})[key] = base64.b64encode(
                    json.dumps(doc, separators=(", ", ": ")).encode()).decode()
                world.cluster.store.touch(secret)
            rollout_restart(world, ns, svc)


def _declares_credential(root: Path, used_by: list[str], external: str) -> bool:
    """Does a manifest of the app give one of the API's users its credential from a Secret?"""
    return _manifest_declares(str(root), tuple(used_by), credential_env(external))


@functools.lru_cache(maxsize=32)
def _manifest_declares(root: str, used_by: tuple[str, ...], env_name: str) -> bool:
    for path in sorted(Path(root, "manifests").glob("*.yaml")):
        for doc in yamlio.load_all(path.read_text()):
            if not isinstance(doc, dict) or (doc.get("metadata") or {}).get("name") not in used_by:
                continue
            for c in (((doc.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []:
                if any(e.get("name") == env_name and (e.get("valueFrom") or {}).get("secretKeyRef")
                       for e in c.get("env") or []):
                    return True
    return False
