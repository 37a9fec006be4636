"""Dependency faults: what the applications lean on fails underneath them — a datastore, a
third-party API, the cluster's DNS, a credential.

Each is injected into the twin directly (no pipeline change), judged only on what the
cluster shows (which pods serve, when they were created, the configuration and credentials
the running containers hold) and, at the end of its window, cleaned up the way the on-call
human would.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Optional

from ..cluster import RunningContainer
from ..k8s.objects import serial_resolver, service_workload
from ..provenance import EvidenceRef
from ..runtime.code import password_key
from .base import Fault, FaultKind, World, node_evidence, workload_evidence
from .infrastructure import (
    app_pods,
    created_since,
    impact_on_nodes,
    rollout_restart,
    services_have_ready_pods,
    serving,
    uncordon,
    zone_nodes,
)

SLOW_LOG = {
    "redis": "# Asynchronous AOF fsync is taking too long (disk is busy?). Writing the AOF buffer without "
             "waiting for fsync to complete, this may slow down Redis.",
    "mongo": '{"s":"W","c":"STORAGE","id":22430,"ctx":"Checkpointer","msg":"WiredTiger message",'
             '"attr":{"message":"fsync on /data/db took 2214ms: device busy"}}',
}
SLOW_LOG_DEFAULT = "WARNING slow I/O on /data: fsync took 2214ms (device busy)"


def running_containers(world: World, ns: str, service: str) -> list[RunningContainer]:
    """Containers of a service that run and answer (their node is up)."""
    return [c for c in world.cluster.kubelet.containers.values()
            if c.namespace == ns and c.service == service and c.state == "running" and c.ctx is not None
            and world.cluster.network.node_up.get(c.node, False)]


def _datastore_pods(world: World, ns: str, service: str) -> list[dict[str, Any]]:
    return [pod for pns, svc, pod in app_pods(world) if pns == ns and svc == service]


class SlowDatastore(FaultKind):
    """A datastore's pods slow down (their volume's fsync stalls, the engine logs it): every
    command they serve takes ``params["latency_ms"]`` longer. Callers slow down too; those
    with timeouts tighter than the delay fail.

    Repair: restart the datastore (``kubectl delete pod`` or ``kubectl rollout restart``); the
    replacement pods come up on fresh storage. Restarting its clients or rolling back a change
    does nothing.
    Mitigated when the datastore has a ready pod and every ready pod of it was created after
    the fault began. Cleanup: the on-call human restarts the datastore."""

    name = "dependency-slow-datastore"
    family = "dependency"
    description = "a datastore answers slowly until it is restarted"
    component_form = "service:<app>/<datastore>"
    repair = "restart the datastore's pods (kubectl delete pod or rollout restart)"
    judge = "the datastore has a ready pod and every ready pod of it was created after the fault began"

    def inject(self, world: World, fault: Fault) -> None:
        ns, ds = fault.app, fault.params["service"]
        ms = float(fault.params.get("latency_ms", 250))
        now = world.cluster.store.clock()
        for pod in _datastore_pods(world, ns, ds):
            world.cluster.network.pod_delay_ms[pod["metadata"]["uid"]] = ms
            c = world.cluster.kubelet.containers.get(pod["metadata"]["uid"])
            if c is not None:
                engine = next((k for k in SLOW_LOG if k in c.image), "")
                c.log(now, SLOW_LOG.get(engine, SLOW_LOG_DEFAULT))
        fault.component = f"service:{ns}/{ds}"
        fault.description = f"datastore {ns}/{ds} answers {ms:.0f} ms slower (its storage stalls)"
        fault.impact = self.symptoms_from(world, ns, ds)

    def mitigated(self, world: World, fault: Fault) -> bool:
        ready = [p for p in _datastore_pods(world, fault.app, fault.params["service"]) if serving(world, p)]
        return bool(ready) and all(created_since(p, fault.start) for p in ready)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return workload_evidence(world, fault.app, fault.params["service"])

    def cleanup(self, world: World, fault: Fault) -> None:
        ns, ds = fault.app, fault.params["service"]
        slow = [p for p in _datastore_pods(world, ns, ds) if p["metadata"]["uid"] in world.cluster.network.pod_delay_ms]
        for pod in slow:
            world.cluster.network.pod_delay_ms.pop(pod["metadata"]["uid"], None)
        if slow:
            rollout_restart(world, ns, ds)


def _fallbacks(world: World, name: str) -> list[tuple[str, Any]]:
    """(namespace, ExternalSpec) for every app that calls the external ``name``."""
    return [(ns, app.externals[name]) for ns, app in sorted(world.apps.items()) if name in app.externals]


class ExternalOutage(FaultKind):
    """A third-party API outside the cluster (here: the card processor) answers ``503`` to every
    call. The services that call it fail, and so do their callers. Nothing in the cluster
    changed: a rollback repairs nothing.

    Repair: switch on the app's documented fallback — for the shop, ``PAYMENT_FALLBACK=queue``
    in the payment service's configuration (a config change through the pipeline, or
    ``kubectl set env deployment/payment PAYMENT_FALLBACK=queue``), so charges are accepted and
    queued for settlement.
    Mitigated when every running pod of the fallback's service uses the fallback value and the
    service has a ready pod. Cleanup: the provider recovers."""

    name = "dependency-external-outage"
    family = "dependency"
    description = "a third-party API the app depends on is down"
    component_form = "external:<name>"
    repair = (
        "switch on the app's documented fallback (shop: PAYMENT_FALLBACK=queue on payment, by "
        "the pipeline or kubectl set env)"
    )
    judge = (
        "every running pod of the fallback's service uses the fallback value, and the service "
        "has a ready pod"
    )

    def inject(self, world: World, fault: Fault) -> None:
        name = fault.params["external"]
        world.cluster.network.externals_down.add(name)
        fault.component = f"external:{name}"
        hosts = sorted({spec.host for _, spec in _fallbacks(world, name)})
        fault.description = f"the external API {name} ({', '.join(hosts)}) answers 503 Service Unavailable"
        for ns, spec in _fallbacks(world, name):
            for svc in spec.used_by:
                fault.impact |= self.symptoms_from(world, ns, svc)

    def mitigated(self, world: World, fault: Fault) -> bool:
        users = _fallbacks(world, fault.params["external"])
        if not users:
            return False
        for ns, spec in users:
            fb = spec.fallback
            if fb is None:
                return False
            containers = running_containers(world, ns, fb.service)
            if not containers or any(c.ctx.config_data.get(fb.key) != fb.value for c in containers if c.ctx):
                return False
            if not services_have_ready_pods(world, {(ns, fb.service)}):
                return False
        return True

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """Where the fallback is switched on: the fallback services' templates and pods."""
        return [r for ns, spec in _fallbacks(world, fault.params["external"]) if spec.fallback is not None
                for r in workload_evidence(world, ns, spec.fallback.service)]

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.externals_down.discard(fault.params["external"])


def caller_services(world: World) -> set[tuple[str, str]]:
    """Services whose pods resolve names: they call another service or an external API."""
    out = set()
    for ns, app in world.apps.items():
        used = {s for ext in app.externals.values() for s in ext.used_by}
        out |= {(ns, s) for s, spec in app.services.items() if spec.calls or s in used}
    return out


class DnsZone(FaultKind):
    """The cluster DNS stops answering for one zone (its node-local cache and the CoreDNS
    replicas there are wedged): every lookup from a pod in that zone times out after 5 s
    (``dial tcp: lookup cart.shop.svc.cluster.local on 10.96.0.10:53: read udp: i/o timeout``).
    Pods that only answer calls are unaffected; pods that make calls fail.

    Repair: move the calling workloads out of the zone — cordon its nodes and drain them (or pin
    the deployments to other zones).
    Mitigated when no active pod of a service that makes calls is bound to a node of the zone
    and every affected service has a ready pod. Cleanup: DNS is repaired and the zone's nodes
    are uncordoned."""

    name = "dependency-dns-zone"
    family = "dependency"
    description = "DNS resolution fails for every pod of one zone"
    component_form = "zone:<zone>"
    repair = (
        "move the calling workloads out of the zone (cordon and drain its nodes, or pin the "
        "deployments elsewhere)"
    )
    judge = (
        "no active pod of a calling service is bound to a node of the zone, and every "
        "affected service has a ready pod"
    )

    def inject(self, world: World, fault: Fault) -> None:
        zone = fault.params["zone"]
        world.cluster.network.dns_broken_zones.add(zone)
        nodes = zone_nodes(world, zone)
        fault.component = f"zone:{zone}"
        fault.nodes = set(nodes)
        fault.zones = {zone}
        fault.description = f"DNS lookups from pods in {zone} time out"
        fault.impact = impact_on_nodes(self, world, set(nodes), caller_services(world))

    def mitigated(self, world: World, fault: Fault) -> bool:
        nodes = set(zone_nodes(world, fault.params["zone"]))
        callers = caller_services(world)
        if any(pod["spec"].get("nodeName") in nodes and (ns, svc) in callers for ns, svc, pod in app_pods(world)):
            return False
        return services_have_ready_pods(world, fault.impact & callers)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return node_evidence(zone_nodes(world, fault.params["zone"])) + \
            [r for ns, svc in sorted(fault.impact & caller_services(world)) for r in workload_evidence(world, ns, svc)]

    def cleanup(self, world: World, fault: Fault) -> None:
        world.cluster.network.dns_broken_zones.discard(fault.params["zone"])
        for n in zone_nodes(world, fault.params["zone"]):
            uncordon(world, n)



class DnsDegraded(FaultKind):
    """A share of the cluster's DNS lookups is lost, in every zone (``share``): the kernel's
    conntrack races on the A and AAAA queries glibc sends in parallel over one UDP socket, drops
    one of them, and the resolver asks again only after its 5 s timeout — past the deadline of
    most calls. Distinct from the zone DNS outage: no zone, node or service is worse than another.

    Effects: every service that calls another fails a small share of its downstream calls with
    "dial tcp: lookup cart.shop.svc.cluster.local on 10.96.0.10:53: read udp: i/o timeout" after
    waiting its whole deadline; a partial error ratio (ServiceHighErrorRate) on callers in every
    app and zone at once, while the services called look healthy. Restarting or scaling the
    callers, or draining a zone, changes nothing.
    Repair: make the callers' resolvers query one at a time — ``dnsConfig: {options: [{name:
    single-request-reopen}]}`` (or ``use-vc``) in the calling deployments' pod templates, through
    the pipeline or ``kubectl patch``, so that their pods are recreated with it.
    Mitigated when every active pod of every calling service has such an option and those
    services have a ready pod. Cleanup: the race stops (a kernel fix on the nodes)."""

    name = "dependency-dns-degraded"
    family = "dependency"
    description = "a share of DNS lookups times out cluster-wide (conntrack race of parallel queries)"
    component_form = "service:kube-system/kube-dns"
    repair = (
        "set dnsConfig option single-request-reopen (or use-vc) in the calling deployments' pod "
        "templates (pipeline or kubectl patch), so their pods are recreated with it"
    )
    judge = (
        "every active pod of every service that calls another has a serial-resolver dnsConfig "
        "option, and those services have a ready pod"
    )

    def inject(self, world: World, fault: Fault) -> None:
        share = float(fault.params.get("share", 0.03))
        for ns in world.apps:
            world.cluster.network.dns_race_share[ns] = share
        fault.component = "service:kube-system/kube-dns"
        fault.description = f"{share:.0%} of DNS lookups time out cluster-wide (conntrack race)"
        fault.impact = {key for ns, svc in self._callers(world) for key in self.symptoms_from(world, ns, svc)}

    @staticmethod
    def _callers(world: World) -> set[tuple[str, str]]:
        """Services whose pods resolve the names of other services (externals are resolved
        by the upstream resolvers, over TCP: not raced)."""
        return {(ns, s) for ns, app in world.apps.items() for s, spec in app.services.items() if spec.calls}

    def mitigated(self, world: World, fault: Fault) -> bool:
        callers = self._callers(world)
        if any((ns, svc) in callers and not serial_resolver(pod["spec"]) for ns, svc, pod in app_pods(world)):
            return False
        return services_have_ready_pods(world, callers)

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        return [r for ns, svc in sorted(self._callers(world)) for r in workload_evidence(world, ns, svc, replicas=False)]

    def cleanup(self, world: World, fault: Fault) -> None:
        for ns in world.apps:
            world.cluster.network.dns_race_share.pop(ns, None)


def datastore_credential(world: World, ns: str, ds: str) -> Optional[tuple[str, str, str]]:
    """(env var, Secret name, key) through which the datastore's deployment gets its password."""
    d = service_workload(world.cluster.store, ns, ds)
    for c in (d or {}).get("spec", {}).get("template", {}).get("spec", {}).get("containers") or []:
        for env in c.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef")
            if ref and env["name"].endswith("PASSWORD"):
                return env["name"], ref["name"], ref["key"]
    return None


class CredentialRotated(FaultKind):
    """A datastore's password is rotated (the secrets operator writes a new value into its
    Secret and sets it on the running server) while its clients keep the old one: they read it
    from their environment when they started. Every command they send is refused with
    ``WRONGPASS invalid username-password pair or user is disabled.``; their readiness probes
    fail with it.

    Repair: restart the clients so they read the current Secret (``kubectl rollout restart
    deployment/<client>``). Restarting the datastore only makes it require the new password too.
    Mitigated when every running client pod presents the password every running datastore
    pod requires, and each client has a ready pod. Cleanup: the on-call human restarts the
    clients."""

    name = "dependency-credential-expired"
    family = "dependency"
    description = "a datastore's credential was rotated under its clients"
    component_form = "service:<app>/<datastore>"
    repair = "restart the clients so they read the current Secret (kubectl rollout restart deployment/<client>)"
    judge = (
        "every running client pod presents the password every running datastore pod requires, "
        "and each client has a ready pod"
    )

    def _clients(self, world: World, ns: str, ds: str) -> list[str]:
        return sorted(s for s, spec in world.apps[ns].services.items() if ds in spec.calls)

    def inject(self, world: World, fault: Fault) -> None:
        ns, ds = fault.app, fault.params["datastore"]
        binding = datastore_credential(world, ns, ds)
        if binding is None:
            raise ValueError(f"{ns}/{ds} takes no password from a Secret; nothing to rotate")
        env_var, secret_name, key = binding
        secret = world.cluster.store.get("Secret", ns, secret_name)
        if secret is None:
            raise ValueError(f"secret {ns}/{secret_name} does not exist")
        new = "r" + hashlib.sha256(f"rotate:{fault.id}:{secret.get('data', {}).get(key, '')}".encode()).hexdigest()[:23]
        secret.setdefault("data", {})[key] = base64.b64encode(new.encode()).decode()
        secret["metadata"].setdefault("annotations", {})["reconcile.external-secrets.io/data-hash"] = \
            hashlib.md5(new.encode()).hexdigest()  # noqa: S324 - a content hash, as the operator writes it
        world.cluster.store.touch(secret)
        for c in running_containers(world, ns, ds):  # CONFIG SET requirepass on the live server
            assert c.ctx is not None
            c.ctx.config_data[env_var] = new
        clients = self._clients(world, ns, ds)
        fault.component = f"service:{ns}/{ds}"
        fault.description = (f"the password of {ns}/{ds} was rotated (Secret {secret_name}); "
                             f"{', '.join(clients) or 'its clients'} still use the old one")
        fault.impact = self.symptoms_from(world, ns, ds)

    def mitigated(self, world: World, fault: Fault) -> bool:
        ns, ds = fault.app, fault.params["datastore"]
        binding = datastore_credential(world, ns, ds)
        if binding is None:
            return False
        servers = running_containers(world, ns, ds)
        required = {c.ctx.config_data.get(binding[0]) for c in servers if c.ctx}
        if len(required) != 1:
            return False
        for client in self._clients(world, ns, ds):
            held = {c.ctx.config_data.get(password_key(ds)) for c in running_containers(world, ns, client) if c.ctx}
            if held != required or not services_have_ready_pods(world, {(ns, client)}):
                return False
        return True

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The clients' templates and pods (who holds which password), and the datastore's."""
        ns, ds = fault.app, fault.params["datastore"]
        return [r for svc in [*self._clients(world, ns, ds), ds] for r in workload_evidence(world, ns, svc)]

    def cleanup(self, world: World, fault: Fault) -> None:
        if not self.mitigated(world, fault):
            for client in self._clients(world, fault.app, fault.params["datastore"]):
                rollout_restart(world, fault.app, client)
