"""Datastore faults whose damage outlives their trigger: a primary's failover that its clients
never follow.

Injected into the twin directly (no pipeline change) and judged on what the cluster shows:
which client processes still hold connections to a server that is gone, and which pods serve.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Optional

from ..cluster import SaturableBackend
from ..pipeline.service import PipelineError
from ..provenance import EvidenceRef
from .base import Fault, FaultKind, World, workload_evidence
from .dependency import running_containers
from .infrastructure import app_pods, rollout_restart, services_have_ready_pods

#: Engines with a primary that fails over, what the replacement logs as it takes the role, and
#: how long detection and promotion take. Redis Sentinel: ``down-after-milliseconds 30000`` in
#: the sentinel.conf Redis ships, then the election and ``REPLICAOF NO ONE`` (a second or two).
#: MongoDB: a replica set's ``electionTimeoutMillis`` defaults to 10000, and its documentation
#: gives "the median time before a cluster elects a new primary should not typically exceed
#: 12 seconds".
FAILOVER: dict[str, tuple[int, timedelta, tuple[str, ...]]] = {
    "redis": (6379, timedelta(seconds=31), (
        "# Connection with master lost.",
        "* Caching the disconnected master state.",
        "* Discarding previously cached master state.",
        "* Setting secondary replication ID to {replid}, valid up to offset: 1048577. New replication ID is {newid}",
        "* MASTER MODE enabled (user request from 'id=7 addr=10.244.0.9:40512 laddr={new}:6379 fd=11 "
        "name=sentinel-26e2cb47-cmd age=612 idle=0 flags=x db=0 sub=0 psub=0 ssub=0 multi=4 qbuf=188 "
        "qbuf-free=20286 argv-mem=4 multi-mem=169 rbs=1024 rbp=1024 obl=45 oll=0 omem=0 tot-mem=22469 "
        "events=r cmd=exec user=default redir=-1 resp=2 lib-name= lib-ver=')",
        "* CONFIG REWRITE executed with success.",
    )),
    "mongo": (27017, timedelta(seconds=12), (
        '{{"s":"I","c":"REPL","id":21401,"ctx":"ReplCoord-1","msg":"Scheduling heartbeat to fetch a new '
        'config","attr":{{"target":"{old}:27017"}}}}',
        '{{"s":"I","c":"ELECTION","id":4615652,"ctx":"ReplCoord-2","msg":"Starting an election, since we\'ve '
        'seen no PRIMARY in election timeout period","attr":{{"electionTimeoutPeriodMillis":10000}}}}',
        '{{"s":"I","c":"ELECTION","id":21450,"ctx":"ReplCoord-3","msg":"Election succeeded, assuming primary '
        'role","attr":{{"term":2}}}}',
        '{{"s":"I","c":"REPL","id":21358,"ctx":"ReplCoord-3","msg":"Replica set state transition",'
        '"attr":{{"newState":"PRIMARY","oldState":"SECONDARY"}}}}',
    )),
}


def engine_of(image: str) -> Optional[str]:
    return next((e for e in FAILOVER if e in image), None)


def unreachable_reply(engine: str, ip: str) -> str:
    """What the client library raises on a pooled connection to an address nobody holds: the
    kernel's EHOSTUNREACH once ARP for the old pod IP goes unanswered."""
    port = FAILOVER[engine][0]
    if engine == "mongo":
        return (f"{ip}:{port}: [Errno 113] No route to host (configured timeouts: socketTimeoutMS: 20000.0ms, "
                f"connectTimeoutMS: 20000.0ms)")
    return f"Error 113 connecting to {ip}:{port}. No route to host."


def clients_of(world: World, ns: str, ds: str) -> list[str]:
    return sorted(s for s, spec in world.apps[ns].services.items() if ds in spec.calls)


def _names_store(name: str, ds: str) -> bool:
    """A client's configured address names the datastore (``cart-cache``, or its FQDN)."""
    return name == ds or name.startswith(ds + ".")


def _pinned(c: Any, ds: str) -> bool:
    return c.ctx is not None and any(_names_store(n, ds) and client.pinned is not None
                                     for n, client in c.ctx.stores.items())


def _failover_choice(rng: random.Random, targets: Any, free: Callable[[tuple[str, str]], bool]) \
        -> Optional[tuple[str, dict[str, Any], list[tuple[str, str]]]]:
    """A datastore whose engine fails over (not memcached: it has no replicas) and that has
    clients; one fault per datastore at a time (the key the other datastore kinds use)."""
    pool = [(app.namespace, ds) for app in targets.apps for ds, spec in sorted(app.services.items())
            if spec.datastore is not None and engine_of(spec.datastore)
            and any(ds in s.calls for s in app.services.values()) and free(("datastore", f"{app.namespace}/{ds}"))]
    if not pool:
        return None
    ns, ds = rng.choice(pool)
    return ns, {"datastore": ds}, [("datastore", f"{ns}/{ds}")]


class DatastoreFailover(FaultKind):
    """A datastore's primary dies (its pod is killed: the node's kernel OOM-kills the server);
    the datastore fails over — after the engine's detection delay its replacement takes the
    primary role (Redis Sentinel's ``+switch-master``, a MongoDB election) and logs it — but the
    clients' connection pools hold the old primary's pod IP, resolved when they started, and
    never resolve the name again: every command they send fails with ``Error 113 connecting to
    <old IP>:6379. No route to host.`` (mongo: ``<old IP>:27017: [Errno 113] No route to host``)
    long after the datastore is healthy again. Their readiness probes, which read the
    datastore, fail with it.

    Repair: restart the clients so they resolve the datastore's Service again
    (``kubectl rollout restart deployment/<client>``). Restarting or scaling the datastore
    changes nothing: the clients never reach it.
    Mitigated when no running pod of a client holds a pooled connection to the old primary,
    every client has a ready pod and the datastore has one. Cleanup: the on-call human restarts
    the clients."""

    name = "datastore-failover"
    family = "dependency"
    description = "a datastore failed over to a new primary; its clients' pools still hold the old one"
    component_form = "service:<app>/<datastore>"
    repair = "restart the clients so they reconnect (kubectl rollout restart deployment/<client>)"
    judge = (
        "no running client pod holds a connection to the old primary, every client has a ready "
        "pod, and the datastore has a ready pod"
    )
    choose = staticmethod(_failover_choice)

    def __init__(self) -> None:
        self._old_primary: dict[str, str] = {}  # fault id -> the dead primary's pod IP

    def inject(self, world: World, fault: Fault) -> None:
        ns, ds = fault.app, fault.params["datastore"]
        store = world.cluster.store
        primaries = [pod for pns, svc, pod in app_pods(world) if pns == ns and svc == ds]
        if not primaries:
            raise ValueError(f"{ns}/{ds} has no pod to fail")
        primary = primaries[0]
        image = primary["spec"]["containers"][0].get("image", "")
        engine = engine_of(image)
        if engine is None:
            raise ValueError(f"{ns}/{ds} ({image}) does not fail over")
        ip = primary["status"].get("podIP", "")
        reply = unreachable_reply(engine, ip)
        clients = clients_of(world, ns, ds)
        if any(not hasattr(c.ctx, "stores") for svc in clients for c in running_containers(world, ns, svc)):
            # a real cluster's clients resolve the name again on their own: no pinned pool to model
            raise PipelineError(501, "a failover its clients do not follow cannot be injected on this cluster; "
                                     "the fault is skipped and recorded")
        for svc in clients:
            for c in running_containers(world, ns, svc):
                assert c.ctx is not None
                names = [n for n in c.ctx.stores if _names_store(n, ds)] or [ds]
                for n in names:
                    c.ctx.store(n).pinned = reply
        victim = world.cluster.kubelet.containers.get(primary["metadata"]["uid"])
        if victim is not None:
            victim.log(store.clock(), "Out of memory: Killed process 1 (redis-server)" if engine == "redis"
                       else '{"s":"F","c":"CONTROL","id":23089,"msg":"Fatal assertion","attr":{"msgid":40507}}')
        store.delete("Pod", ns, primary["metadata"]["name"])
        self._old_primary[fault.id] = ip
        fault.component = f"service:{ns}/{ds}"
        fault.description = (f"the primary of {ns}/{ds} ({primary['metadata']['name']}, {ip}) died and the "
                             f"datastore failed over; its clients ({', '.join(clients)}) still connect to {ip}")
        fault.impact = self.symptoms_from(world, ns, ds)

    def active(self, world: World, fault: Fault) -> bool:
        """The failover completes once the engine's detection delay has passed and a replacement
        serves: it logs its promotion then."""
        ns, ds = fault.app, fault.params["datastore"]
        new = running_containers(world, ns, ds)
        pod = (world.cluster.store.get("Pod", ns, new[0].pod_name) if new else None) or {}
        engine = engine_of(pod["spec"]["containers"][0].get("image", "")) if pod else None
        now = world.cluster.store.clock()
        if engine is None or now < fault.start + FAILOVER[engine][1]:
            return False
        old = self._old_primary.get(fault.id, "")
        ip = (pod.get("status") or {}).get("podIP", "")
        for line in FAILOVER[engine][2]:
            new[0].log(now, line.format(old=old, new=ip, replid="8f2e" * 10, newid="c41d" * 10))
        return True

    def mitigated(self, world: World, fault: Fault) -> bool:
        ns, ds = fault.app, fault.params["datastore"]
        clients = clients_of(world, ns, ds)
        for svc in clients:
            if any(_pinned(c, ds) for c in running_containers(world, ns, svc)):
                return False
        return services_have_ready_pods(world, {(ns, s) for s in [*clients, ds]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The clients' pods and templates: whose processes hold the old address."""
        ns, ds = fault.app, fault.params["datastore"]
        return [r for svc in clients_of(world, ns, ds) for r in workload_evidence(world, ns, svc)]

    def cleanup(self, world: World, fault: Fault) -> None:
        if not self.mitigated(world, fault):
            for client in clients_of(world, fault.app, fault.params["datastore"]):
                rollout_restart(world, fault.app, client)


# -- the cache stampede ---------------------------------------------------------------------------

#: The hit ratio the judge wants back (over the backend_queue window): a warm cache of these
#: apps serves nearly every read; below it the misses alone can refill the queue.
WARM_HIT_RATIO = 0.9
HERD_WAIT_MS = 30000.0  # the queue's bound (backend_queue.MAX_WAIT_S)


def _engine_is(world: World, ns: str, svc: str, engine: str) -> bool:
    spec = world.apps[ns].services.get(svc)
    return spec is not None and spec.datastore is not None and engine in spec.datastore


def _stampede_choice(rng: random.Random, targets: Any, free: Callable[[tuple[str, str]], bool]) \
        -> Optional[tuple[str, dict[str, Any], list[tuple[str, str]]]]:
    """A memcached in front of a shared mongo: a service reads the database through the cache
    and other services read it too (the hotel's rate and profile, in front of its catalogue).
    A database behind one service only is that service's store of record (bookings, posts):
    its load is mostly writes, which no cache takes away. The backend's capacity covers its warm load plus a share of the cache's:
    the example of Bronson et al. (HotOS 2021, "Metastable failures in distributed systems") is
    a database provisioned for the misses of a 90%-hit cache, which a cold cache multiplies.
    ``headroom``: where the database's capacity lies between its warm load (0) and the load
    of the stuck state (1: every client request's first miss, and the driver's retry of it)."""
    pool = []
    for app in targets.apps:
        services = app.services
        for spec in services.values():
            caches = [d for d in spec.calls if services[d].datastore and "memcached" in services[d].datastore]
            dbs = [d for d in spec.calls if services[d].datastore and "mongo" in services[d].datastore]
            readers = [s for s, other in services.items() if dbs and dbs[0] in other.calls]
            if len(caches) == 1 and len(dbs) == 1 and len(readers) > 1 and (app.namespace, caches[0], dbs[0]) not in pool \
                    and free(("datastore", f"{app.namespace}/{caches[0]}")) \
                    and free(("datastore", f"{app.namespace}/{dbs[0]}")):
                pool.append((app.namespace, caches[0], dbs[0]))
    if not pool:
        return None
    ns, cache, db = rng.choice(sorted(pool))
    return ns, {"cache": cache, "backend": db, "headroom": rng.choice([0.6, 0.7, 0.8])}, \
        [("datastore", f"{ns}/{cache}"), ("datastore", f"{ns}/{db}")]


class CacheStampede(FaultKind):
    """A maintenance job flushes a cache (memcached ``flush_all``) in front of a database that
    is provisioned for the load the warm cache leaves it (its capacity ``headroom`` of the way
    from that load to the load of the stuck state). Every read misses and goes to the database at once; its queue's wait
    passes the callers' timeouts within seconds, so the reads time out before the callers
    write the values back: the cache never refills, the misses go on, and the database keeps
    serving the abandoned reads. A metastable failure: the trigger is long over (the flush took
    a millisecond) and the overload sustains itself. Callers of the database — the cache's
    clients and every other reader — fail with ``deadline exceeded``; the database's latency
    sits at its queue's wait, its request rate several times its normal one.

    Repair: add backend capacity above the cold-cache load until the cache is warm again (scale
    the database's workload up; back down once its hit ratio has recovered) — the on-call move
    for a metastable overload is to shed load or add capacity until the sustaining loop breaks
    (Huang et al., OSDI 2022, "Metastable failures in the wild"). Restarting the cache flushes it
    again; restarting the clients, or reverting a change, leaves the loop as it is.
    Mitigated when the database's queue is empty (its load is below its capacity), the cache's
    hit ratio is back above 90%, and the cache, the database and the clients have ready pods.
    Cleanup: the on-call human adds capacity until the cache is warm."""

    name = "cache-stampede"
    family = "load"
    description = "a cache flush turns into a self-sustaining overload of the database behind it"
    component_form = "service:<app>/<database>"
    repair = (
        "add database capacity above the cold-cache load (scale its workload up) until the cache's "
        "hit ratio recovers, then scale back"
    )
    judge = (
        "the database's queue is empty (load below capacity), the cache's hit ratio is above 90% "
        "again, and the cache, the database and its clients have ready pods"
    )
    choose = staticmethod(_stampede_choice)

    def _clients(self, world: World, ns: str, cache: str) -> list[str]:
        return clients_of(world, ns, cache)

    def inject(self, world: World, fault: Fault) -> None:
        ns, cache, db = fault.app, fault.params["cache"], fault.params["backend"]
        if not (_engine_is(world, ns, cache, "memcached") and _engine_is(world, ns, db, "mongo")):
            raise ValueError(f"{ns}/{cache} in front of {ns}/{db} is not a cache in front of a database")
        clients = self._clients(world, ns, cache)
        timeout = min((float(c.ctx.config_data.get("REQUEST_TIMEOUT_MS", 1000)) for s in clients
                       for c in running_containers(world, ns, s) if c.ctx is not None), default=1000.0)
        caches = running_containers(world, ns, cache)
        hits = sum(getattr(c.module, "_STATS", {}).get("get_hits", 0.0) for c in caches)
        misses = sum(getattr(c.module, "_STATS", {}).get("get_misses", 0.0) for c in caches)
        # Every in-flight read misses at once: the database's queue is full at once (its wait
        # past every deadline); the queue model sizes it once it has measured the stuck load.
        world.cluster.network.backends[f"{ns}/{db}"] = SaturableBackend(
            cache=cache, warm_rps=_mean(world.cluster.metrics.window(ns, db, "requests_per_second", 4)),
            headroom=float(fault.params.get("headroom", 0.7)), client_timeout_ms=timeout,
            warm_hit_ratio=hits / (hits + misses) if hits + misses else 1.0, delay_ms=HERD_WAIT_MS)
        now = world.cluster.store.clock()
        for c in caches:
            data = getattr(c.module, "_DATA", None)
            if data is not None:
                data.clear()
            c.log(now, "<31 flush_all")
            c.log(now, ">31 OK")
        fault.component = f"service:{ns}/{db}"
        fault.description = (f"{ns}/{cache} was flushed; {ns}/{db}, provisioned for the warm cache's load, "
                             f"is stuck in overload (misses, timeouts, retries)")
        fault.impact = self.symptoms_from(world, ns, db) | self.symptoms_from(world, ns, cache)

    def _warm(self, backend: SaturableBackend) -> float:
        """The hit ratio that counts as warm again: 90%, or nearly the cache's own before."""
        return min(WARM_HIT_RATIO, 0.95 * backend.warm_hit_ratio)

    def mitigated(self, world: World, fault: Fault) -> bool:
        ns, cache, db = fault.app, fault.params["cache"], fault.params["backend"]
        backend = world.cluster.network.backends.get(f"{ns}/{db}")
        if backend is None or backend.backlog > 0 or backend.hit_ratio < self._warm(backend) or not backend.window:
            return False
        return services_have_ready_pods(world, {(ns, s) for s in [cache, db, *self._clients(world, ns, cache)]})

    def evidence(self, world: World, fault: Fault) -> list[EvidenceRef]:
        """The database's replicas and pods (its capacity), the cache's and its clients' pods."""
        ns, cache = fault.app, fault.params["cache"]
        return [r for svc in [fault.params["backend"], cache, *self._clients(world, ns, cache)]
                for r in workload_evidence(world, ns, svc)]

    def cleanup(self, world: World, fault: Fault) -> None:
        ns, db = fault.app, fault.params["backend"]
        network = world.cluster.network
        if network.backends.pop(f"{ns}/{db}", None) is None:
            return
        live = set()
        for c in world.cluster.kubelet.containers.values():
            live.add(c.pod_uid)
            if c.namespace == ns and c.service == db:
                network.pod_delay_ms.pop(c.pod_uid, None)
        for uid in [u for u in network.pod_delay_ms if u not in live]:  # a database pod scaled away meanwhile
            del network.pod_delay_ms[uid]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0
