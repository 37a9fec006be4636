"""Traffic through the applications' real handler code.

Each tick, every application receives a sample of requests at its ingress; each sampled request
stands for ``weight`` real ones. A request runs the entry service's handler, whose ``ctx.call``
picks a ready endpoint of the called Service (same zone first), crosses the network model
(hop latency, partitions, DNS), and runs the callee's handler in that pod's module instance.
Latency is the handler's declared work, slowed by CPU contention, plus downstream latencies and
network hops. A failure raises a :class:`ServiceError` into the caller, carrying the component
where it originated — so symptoms appear upstream of the cause, as in production.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Optional

from ..cluster import SaturableBackend
from ..k8s.objects import serial_resolver
from ..k8s.store import Store
from ..runtime.code import Context, Outcome, ServiceError, UpstreamTimeout, format_exception
from ..runtime.credentials import refusal
from .clocks import token_rejection
from .counts import Groups, log_sample
from .network_policy import PolicyNetwork

if TYPE_CHECKING:
    from ..apps import AppSpec
    from ..tracing import ActiveTrace
    from .kubelet import Container, Kubelet
    from .tracing import HeadSampler

INGRESS = "ingress"  # the cloud load balancer: outside the cluster's DNS and node network
INGRESS_TIMEOUT_MS = 10000.0
DNS_TIMEOUT_MS = 5000.0
DEFAULT_TIMEOUT_MS = 1000.0
SAMPLES_PER_TICK = 16
MAX_TRACEBACKS_PER_TICK = 3
_CODES = {404: "404", 500: "500", 503: "503", 504: "504"}


@dataclass
class Network:
    """Physical network state the faults manipulate."""

    node_up: dict[str, bool] = field(default_factory=dict)
    node_zone: dict[str, str] = field(default_factory=dict)
    partitions: set[frozenset[str]] = field(default_factory=set)
    zone_latency_ms: dict[str, float] = field(default_factory=dict)
    dns_broken_zones: set[str] = field(default_factory=set)
    node_cpu_noise: dict[str, float] = field(default_factory=dict)  # millicores stolen by neighbours
    pod_delay_ms: dict[str, float] = field(default_factory=dict)  # pod uid -> added to every request it serves
    externals_down: set[str] = field(default_factory=set)  # third-party APIs answering 503
    dns_race_share: dict[str, float] = field(default_factory=dict)  # namespace -> share of lookups lost (conntrack race)
    # When on, a pod whose CPU demand passes its limit cannot serve the excess: that share of
    # its requests waits in the queue until the caller's timeout (CFS throttling under overload).
    cpu_overload_timeouts: bool = False
    backends: dict[str, SaturableBackend] = field(default_factory=dict)  # "<ns>/<datastore>" -> queue (backend_queue.py)
    clock_skew: dict[str, float] = field(default_factory=dict)  # node -> seconds its clock is off (twin/clocks.py)
    credentials_checked: bool = True  # third-party APIs check the pods' credentials (runtime/credentials.py)

    def reachable(self, a: str, b: str) -> bool:
        return a == b or frozenset((a, b)) not in self.partitions

    def hop_ms(self, a: str, b: str) -> float:
        base = 0.4 if a == b else 2.5
        return base + self.zone_latency_ms.get(a, 0.0) + (self.zone_latency_ms.get(b, 0.0) if a != b else 0.0)


class _Frame:
    """One request being served: the CPU work its handler declared and the time it waited on
    calls of its own."""

    __slots__ = ("container", "work_ms", "downstream_ms")

    def __init__(self, container: Optional[Container]) -> None:
        self.container = container
        self.work_ms = 0.0
        self.downstream_ms = 0.0


@dataclass
class _Endpoint:
    containers: list[Container]
    port_ok: bool
    running: list[Container] = field(default_factory=list)  # serving this tick …
    by_zone: dict[str, list[Container]] = field(default_factory=dict)  # … and per zone

    def __post_init__(self) -> None:
        self.running = [c for c in self.containers if c.state == "running"]
        for c in self.running:
            self.by_zone.setdefault(c.zone, []).append(c)


@dataclass
class _Kept:
    """A Service's _Endpoint as prepare() made it, with what it was made from: the Endpoints'
    resourceVersion, the container serving each address's pod uid (None: none) and the states
    of those that served."""

    version: Optional[str]
    endpoint: _Endpoint
    members: list[tuple[str, Optional[Container]]]
    states: list[str]

    def serving(self, by_uid: dict[str, Container]) -> bool:
        """Do the same container objects serve the addresses, in the same states?"""
        for uid, c in self.members:
            if by_uid.get(uid) is not c:
                return False
        return [c.state for c in self.endpoint.containers] == self.states


def _getrandbits_of(rng: random.Random) -> Optional[Callable[[int], int]]:
    """``rng.getrandbits`` when ``rng.choice(seq)`` is exactly ``seq[r]`` with ``r`` drawn by
    ``Random._randbelow_with_getrandbits(len(seq))`` (a plain ``random.Random``), so that the
    traffic engine can make that draw inline, bit for bit the same; None for any other rng."""
    cls = type(rng)
    if cls.choice is random.Random.choice and \
            getattr(cls, "_randbelow", None) is random.Random._randbelow_with_getrandbits:  # type: ignore[attr-defined]
        return rng.getrandbits
    return None


def _no_log(_line: str) -> None:
    """The load balancer's logger: it logs nothing."""


# ``float`` of a caller's REQUEST_TIMEOUT_MS setting, parsed once per distinct value (a call
# reads the setting on every call, as a rotation applies at once; parsing it cost more than the
# rest of ``call``). A bad value raises ValueError every time, as float() does: errors are not
# cached.
_timeout_ms = functools.lru_cache(maxsize=256)(float)


def _contention(rho: float) -> float:
    """Queueing slowdown at utilisation rho, normalised to 1 at light load."""
    return max(1.0, 0.7 / (1.0 - min(rho, 0.97)))


class TrafficEngine:
    """The router behind every ``ctx.call`` and the load generator at each app's ingress."""

    def __init__(self, store: Store, network: Network, apps: list[AppSpec]) -> None:
        self.store = store
        self.network = network
        self.policies = PolicyNetwork(store)  # NetworkPolicy enforcement (twin/network_policy.py)
        self.apps = {a.namespace: a for a in apps}
        self.kubelet: Optional[Kubelet] = None
        self._stack: list[_Frame] = []
        self._endpoints: dict[tuple[str, str], _Endpoint] = {}
        self._kept: dict[tuple[str, str], _Kept] = {}  # prepare()'s memo of each Service's _Endpoint
        self._slowdown: dict[str, float] = {}  # pod uid -> CPU slowdown factor
        self._shed: dict[str, float] = {}  # pod uid -> share of requests beyond its CPU limit
        self._mean_work: dict[str, float] = {}  # pod uid -> CPU ms per request served last tick
        # How many real requests the call being served stands for (a datastore's hit ratio
        # counts them with ``getattr(ctx.router, "weight", 1.0)`` on every command): a plain
        # attribute, not a property, since that read is on the datastore's hot path.
        self.weight = 1.0
        self._rng = random.Random(0)
        self._getrandbits = _getrandbits_of(self._rng)  # always set with _rng (_use_rng)
        self._pod_work: defaultdict[str, float] = defaultdict(float)
        self._pod_requests: defaultdict[str, float] = defaultdict(float)
        self._tracebacks: Counter = Counter()
        self._now: Optional[datetime] = None
        # (namespace, service) -> the resourceVersions of the Service and of the pod its port
        # check read, and the answer: a pure function of those two objects' specs (_port_ok).
        self._ports_checked: dict[tuple[str, str], tuple[str, str, bool]] = {}
        # Every sampled call this tick, grouped for the scrape's counts (twin/counts.py: by
        # service, endpoint, pod, code and the pods it chose among; its weight and latency).
        self.samples: Groups = {}
        # Tracing (twin/tracing.py): the head sampler, the trace of the request being served (None
        # when it is not traced, and outside run(): probes, startup hooks and execs are never
        # traced) and the exception of a service's own bug, kept for its span.
        self.tracer: Optional[HeadSampler] = None
        self._trace: Optional[ActiveTrace] = None
        self._bug: Optional[BaseException] = None

    # -- per tick --------------------------------------------------------------------------
    def prepare(self, now: datetime, rng: random.Random) -> None:
        """Snapshot endpoints and CPU pressure for this tick."""
        assert self.kubelet is not None
        self._now = now
        self._use_rng(rng)
        self._tracebacks.clear()
        self.policies.prepare(self.kubelet.containers)
        by_uid = self.kubelet.containers
        # A Service's _Endpoint is a function of its Endpoints object (its resourceVersion), of
        # the container object serving each pod uid the addresses name and of their states (a
        # container's zone is fixed when it is made), and of the port check (_port_ok, asked
        # every tick): last tick's is kept while none of these moved.
        last = self._kept
        kept: dict[tuple[str, str], _Kept] = {}
        endpoints: dict[tuple[str, str], _Endpoint] = {}
        for svc in self.store.list("Service"):
            md = svc["metadata"]
            key = ns, name = md["namespace"], md["name"]
            ep = self.store.get("Endpoints", ns, name)
            version = ep["metadata"]["resourceVersion"] if ep is not None else None
            before = last.get(key)
            if before is not None and before.version == version and before.serving(by_uid):
                ready = before.endpoint.containers
            else:
                before = None
                uids, ready = [], []
                for subset in (ep or {}).get("subsets") or []:
                    for addr in subset.get("addresses") or []:
                        uid = addr.get("targetRef", {}).get("uid", "")
                        uids.append(uid)
                        c = by_uid.get(uid)
                        if c is not None:
                            ready.append(c)
            port_ok = self._port_ok(svc, ready)
            if before is not None and port_ok == before.endpoint.port_ok:
                endpoint = before.endpoint
            else:
                endpoint = _Endpoint(ready, port_ok)
                before = _Kept(version, endpoint, [(u, by_uid.get(u)) for u in uids] if before is None else
                               before.members, [c.state for c in ready])
            kept[key] = before
            endpoints[key] = endpoint
        self._kept = kept
        self._endpoints = endpoints
        node_load: defaultdict[str, float] = defaultdict(float)
        for c in by_uid.values():
            node_load[c.node] += c.cpu_millicores
        node_rho = {}
        for name, load in node_load.items():
            node = self.store.get("Node", None, name)
            capacity = float(node["status"]["allocatable"]["cpu"]) * 1000 if node else 4000.0
            node_rho[name] = _contention((load + self.network.node_cpu_noise.get(name, 0.0)) / capacity)
        self._slowdown.clear()
        for uid, c in by_uid.items():
            pod_rho = c.cpu_millicores / c.cpu_limit if c.cpu_limit else 0.0
            self._slowdown[uid] = max(node_rho[c.node], _contention(pod_rho))
        self._shed.clear()
        if self.network.cpu_overload_timeouts:
            self._overload(by_uid)

    def _overload(self, by_uid: dict[str, Container]) -> None:
        """Per (service, zone) — the pods a caller's local-first routing spreads over — the
        share of the demand measured last tick that the pods' CPU limits cannot serve."""
        groups: dict[tuple[str, str, str], list[float]] = {}  # -> [demand, limit, work, requests]
        for uid, c in by_uid.items():
            g = groups.setdefault((c.namespace, c.service, c.zone), [0.0, 0.0, 0.0, 0.0])
            g[0] += c.cpu_millicores
            g[1] += c.cpu_limit
            g[2] += self._pod_work.get(uid, 0.0)
            g[3] += self._pod_requests.get(uid, 0.0)
        for uid, c in by_uid.items():
            demand, limit, work, requests = groups[(c.namespace, c.service, c.zone)]
            if requests:
                self._mean_work[uid] = work / requests
            if limit and demand > limit:
                self._shed[uid] = 1.0 - limit / demand

    def routable(self) -> dict[tuple[str, str], list[str]]:
        """The pods each Service routes to this tick (its ready, running endpoints)."""
        return {key: [c.pod_name for c in ep.running] for key, ep in self._endpoints.items()
                if ep.port_ok and ep.running}

    def _port_ok(self, svc: dict[str, Any], ready: list[Container]) -> bool:
        """Does the Service's targetPort reach a port of its (first ready) pod? Checked again only
        when the Service or that pod changed (every change bumps its resourceVersion)."""
        if not ready:
            return True
        pod = self.store.get("Pod", ready[0].namespace, ready[0].pod_name)
        if pod is None:
            return True
        key = (svc["metadata"]["namespace"], svc["metadata"]["name"])
        svc_rv, pod_rv = svc["metadata"]["resourceVersion"], pod["metadata"]["resourceVersion"]
        checked = self._ports_checked.get(key)
        if checked is not None and checked[0] == svc_rv and checked[1] == pod_rv:
            return checked[2]
        ok = self._ports_match(svc, pod)
        self._ports_checked[key] = (svc_rv, pod_rv, ok)
        return ok

    @staticmethod
    def _ports_match(svc: dict[str, Any], pod: dict[str, Any]) -> bool:
        spec = pod["spec"]["containers"][0]
        ports = {p.get("containerPort") for p in spec.get("ports") or []} | \
            {p.get("name") for p in spec.get("ports") or [] if p.get("name")}
        return all(p.get("targetPort", p.get("port")) in ports for p in svc["spec"].get("ports") or [])

    def run(self, dt: float, rps_of: Callable[[AppSpec], float]) -> Groups:
        """Send one tick's sampled requests into every app; returns the tick's sampled calls
        (:attr:`samples`: what the scrape counts from)."""
        self._pod_work.clear()
        self._pod_requests.clear()
        self.samples = {}
        tracer = self.tracer
        rng = self._rng  # (only an aside swaps it, never while the tick's traffic runs)
        for ns, app in self.apps.items():
            rps = rps_of(app)
            if rps <= 0:
                continue
            zones = sorted(set(self.network.node_zone.values())) or ["zone-a"]
            traffic = app.traffic
            entry = traffic.entry
            plan = traffic.plan(SAMPLES_PER_TICK)
            if tracer is not None:
                assert self._now is not None
                tracer.tick(self._now, dt, sum(n for _, n, _ in plan))
            # The load balancer's side of each request, one per zone it enters by: _call reads
            # only its app, service, pod and zone, and nothing keeps it, so the tick's requests
            # through one zone share it.
            balancers: dict[str, Context] = {}
            for mix, n, share in plan:
                self.weight = rps * share * dt / n
                endpoint = mix.endpoint
                for _ in range(n):
                    params = traffic.params(mix, rng)
                    zone = rng.choice(zones)
                    ingress = balancers.get(zone)
                    if ingress is None:
                        ingress = balancers[zone] = Context(app=ns, service=INGRESS, pod=INGRESS, zone=zone,
                                                            config_data={}, router=self, logger=_no_log)
                    self._stack = [_Frame(None)]
                    if tracer is not None:
                        self._trace = tracer.next()
                    try:
                        self._call(ingress, entry, endpoint, params, INGRESS_TIMEOUT_MS)
                    except ServiceError as exc:
                        if self._trace is not None and not self._trace.raw:  # the entry Service reached no pod
                            self._trace.client_error(1, None, ns, entry, endpoint, 0.0,
                                                     self._stack[0].downstream_ms, exc.status, str(exc))
        self._trace = None
        assert self.kubelet is not None
        for uid, c in self.kubelet.containers.items():
            c.cpu_millicores = self._pod_work.get(uid, 0.0) / dt
        return self.samples

    def served(self, uid: str) -> float:
        """The requests the pod served in the last tick (sampled, weighted): what its request
        counter grew by, as a metrics adapter reads it for the autoscaler."""
        return self._pod_requests.get(uid, 0.0)

    # -- the Router protocol ---------------------------------------------------------------
    def work(self, ctx: Context, ms: float) -> None:
        if self._stack:
            self._stack[-1].work_ms += ms

    def call(self, ctx: Context, service: str, endpoint: str, payload: dict) -> dict:
        timeout = _timeout_ms(ctx.config_data.get("REQUEST_TIMEOUT_MS", DEFAULT_TIMEOUT_MS))
        if self._trace is not None:
            return self._traced(lambda: self._call(ctx, service, endpoint, payload, timeout), ctx, ctx.app, service,
                                endpoint)
        return self._call(ctx, service, endpoint, payload, timeout)

    def external(self, ctx: Context, name: str, op: str, payload: dict) -> dict:
        """A pod's call to a third-party API declared under the app's ``externals:``."""
        if self._trace is not None:
            return self._traced(lambda: self._external(ctx, name, op, payload), ctx, "", name, op)
        return self._external(ctx, name, op, payload)

    def _external(self, ctx: Context, name: str, op: str, payload: dict) -> dict:
        caller = self._stack[-1] if self._stack else _Frame(None)
        app = self.apps.get(ctx.app)
        spec = app.externals.get(name) if app is not None else None
        if spec is None:
            caller.downstream_ms += 2.0
            raise ServiceError(name, 503, f"dial tcp: lookup {name}: no such host",
                               origin=self._component(ctx.app, ctx.service))
        if ctx.zone in self.network.dns_broken_zones:
            caller.downstream_ms += DNS_TIMEOUT_MS
            raise ServiceError(name, 503, f"dial tcp: lookup {spec.host} on 10.96.0.10:53: read udp: i/o timeout",
                               origin=f"zone:{ctx.zone}")
        caller.downstream_ms += spec.latency_ms
        if name in self.network.externals_down:
            raise ServiceError(name, 503, f"POST https://{spec.host}/v1/{op}: 503 Service Unavailable",
                               origin=f"external:{name}")
        refused = refusal(ctx.config_data, name, self._now) if self._now is not None else None
        if refused is not None:  # the provider's key check (runtime/credentials.py)
            raise ServiceError(name, 401, f"POST https://{spec.host}/v1/{op}: {refused}", origin=f"external:{name}")
        digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()
        return {"id": f"{op}_{digest[:16]}", "status": "succeeded"}

    def invoke(self, ctx: Context, fn: Callable[[], Any], weight: float) -> Outcome:
        """Run a probe or startup hook in a container, with its downstream calls counted."""
        saved_stack, saved_weight = self._stack, self.weight
        container = self._container_of(ctx)
        self._stack, self.weight = [_Frame(container)], weight
        try:
            value = fn()
            error = None
        except ServiceError as exc:
            value, error = None, str(exc)
        except Exception as exc:  # noqa: BLE001 - the probe answers 500
            value, error = None, f"{type(exc).__name__}: {exc}"
            ctx.log("ERROR readiness check failed\n" + format_exception(exc))
        frame = self._stack[0]
        latency = frame.work_ms * self._slowdown.get(container.pod_uid, 1.0) if container else frame.work_ms
        latency += frame.downstream_ms
        self._stack, self.weight = saved_stack, saved_weight
        return Outcome(value=value, error=error, latency_ms=latency)

    # -- requests from inside a container (kubectl exec, debug pods) -------------------------
    def serve(self, target: Container, endpoint: str, payload: dict, rng: random.Random,
              now: datetime) -> tuple[int, dict[str, Any], float]:
        """One request from outside the sampled traffic (a ``curl`` in an exec, a debug pod's
        ``wget``) into ``target``'s handler for ``endpoint``, answered as the runtime's HTTP
        server answers it: (status, JSON body, latency in ms). The handler and its downstream
        calls run as a sampled request's do (faults, partitions, DNS, latency), but nothing is
        counted in the tick's statistics and the tick's random stream is left alone."""
        ns, svc = target.namespace, target.service
        me = self._component(ns, svc)
        handler = target.module.ENDPOINTS.get(endpoint) if target.module is not None else None
        if handler is None or target.ctx is None:
            return 404, {"error": f"no handler for {endpoint!r}", "origin": me}, 0.0
        frame = _Frame(target)
        with self._aside(rng, now):
            self._stack.append(frame)
            try:
                result = handler(target.ctx, payload)
                status, body = 200, (result if isinstance(result, dict) else {"value": result})
            except ServiceError as exc:
                status = 404 if exc.status == 404 else 500
                body = {"error": str(exc), "origin": me if exc.status == 404 else exc.origin}
                self._log_error(target, endpoint, f"ERROR {endpoint}: upstream call failed: {exc}")
            except Exception as exc:  # noqa: BLE001 - the service's own bug: a 500 with a traceback
                status, body = 500, {"error": "Internal Server Error", "origin": me}
                self._log_error(target, endpoint, f"ERROR {endpoint} failed\n{format_exception(exc)}",
                                key=type(exc).__name__)
        latency = frame.work_ms * self._slowdown.get(target.pod_uid, 1.0) + frame.downstream_ms
        return status, body, latency + self.network.pod_delay_ms.get(target.pod_uid, 0.0)

    def ready(self, target: Container, rng: random.Random, now: datetime) -> tuple[bool, str, float]:
        """``GET /readyz`` from inside a container: the module's ``ready(ctx)``, kept out of the
        tick's statistics like :meth:`serve`. (ready, why not, latency in ms)."""
        fn = getattr(target.module, "ready", None)
        if not callable(fn) or target.ctx is None:
            return True, "", 0.0
        ctx = target.ctx
        with self._aside(rng, now):
            outcome = self.invoke(ctx, lambda: fn(ctx), weight=0.0)
        ok = outcome.error is None and bool(outcome.value)
        return ok, outcome.error or ("" if ok else "not ready"), outcome.latency_ms

    @contextmanager
    def _aside(self, rng: random.Random, now: datetime) -> Iterator[None]:
        """Serve a request that no tick sampled: weight 0 (no CPU, no request counted), samples
        of its own (thrown away: the scrape never counts them), its own random stream, its own
        time."""
        saved = self._stack, self.weight, self._rng, self._now, self.samples
        self._stack, self.weight, self._now, self.samples = [_Frame(None)], 0.0, now, {}
        self._use_rng(rng)
        try:
            yield
        finally:
            self._stack, self.weight, rng, self._now, self.samples = saved
            self._use_rng(rng)

    def _use_rng(self, rng: random.Random) -> None:
        """Draw from ``rng`` from now on (the tick's stream, or an aside's)."""
        self._rng = rng
        self._getrandbits = _getrandbits_of(rng)

    # -- internals -------------------------------------------------------------------------
    def _container_of(self, ctx: Context) -> Optional[Container]:
        assert self.kubelet is not None
        return self.kubelet.by_name.get((ctx.app, ctx.pod))

    def _dns_race(self, ns: str, container: Optional[Container]) -> bool:
        """Does this lookup lose an answer to the conntrack race? Never from a pod whose
        resolver queries one at a time; a draw only while the knob is on."""
        pod = self.store.get("Pod", ns, container.pod_name) if container is not None else None
        return pod is not None and not serial_resolver(pod["spec"]) and \
            self._rng.random() < self.network.dns_race_share.get(ns, 0.0)

    def _component(self, ns: str, service: str) -> str:
        return f"service:{ns}/{service}"

    def _call(self, ctx: Context, service: str, endpoint: str, payload: dict, timeout_ms: float) -> dict:
        ns = ctx.app
        caller = self._stack[-1]
        network = self.network
        if network.dns_broken_zones and ctx.zone in network.dns_broken_zones and ctx.service != INGRESS:
            caller.downstream_ms += DNS_TIMEOUT_MS
            raise ServiceError(service, 503, f"dial tcp: lookup {service}.{ns}.svc.cluster.local on 10.96.0.10:53: "
                                             "read udp: i/o timeout", origin=f"zone:{ctx.zone}")
        if network.dns_race_share and ctx.service != INGRESS and self._dns_race(ns, caller.container):
            # the lost answer is asked again after the resolver's timeout, past most deadlines
            caller.downstream_ms += min(timeout_ms, DNS_TIMEOUT_MS)
            if timeout_ms <= DNS_TIMEOUT_MS:
                raise ServiceError(service, 504, f"dial tcp: lookup {service}.{ns}.svc.cluster.local on 10.96.0.10:53: "
                                                 "read udp: i/o timeout", origin="service:kube-system/kube-dns")
        ep = self._endpoints.get((ns, service))
        if ep is None:  # the caller names a host that does not exist: the caller is misconfigured
            caller.downstream_ms += 2.0
            raise ServiceError(service, 503, f"dial tcp: lookup {service}.{ns}.svc.cluster.local: no such host",
                               origin=self._component(ns, service if ctx.service == INGRESS else ctx.service))
        if not ep.port_ok:
            caller.downstream_ms += 1.0
            log_sample(self.samples, ns, service, endpoint, None, "", "503", 0.0, self.weight)
            raise ServiceError(service, 503, f"dial tcp {service}.{ns}: connect: connection refused",
                               origin=self._component(ns, service))
        candidates = ep.running
        if not candidates:
            caller.downstream_ms += 1.0
            log_sample(self.samples, ns, service, endpoint, None, "", "503", 0.0, self.weight)
            raise ServiceError(service, 503, "upstream connect error or disconnect/reset before headers. "
                                             "reset reason: connection failure (no healthy upstream)",
                               origin=self._component(ns, service))
        zone = ctx.zone
        pool = ep.by_zone.get(zone) or candidates  # same zone first
        getrandbits = self._getrandbits
        if getrandbits is not None:  # self._rng.choice(pool), inlined: the same draws (_getrandbits_of)
            n = len(pool)
            k = n.bit_length()
            r = getrandbits(k)
            while r >= n:
                r = getrandbits(k)
            target = pool[r]
        else:
            target = self._rng.choice(pool)
        if network.zone_latency_ms:
            hop = network.hop_ms(zone, target.zone)
            if ctx.service == INGRESS and zone != target.zone:  # the balancer is not slowed by a zone's network
                hop -= network.zone_latency_ms.get(zone, 0.0)
        else:  # hop_ms with no zone's latency added (0.4 + 0.0 + 0.0 is 0.4, 2.5 + 0.0 + 0.0 is 2.5)
            hop = 0.4 if zone == target.zone else 2.5
        if not network.node_up.get(target.node, True):
            caller.downstream_ms += timeout_ms
            log_sample(self.samples, ns, service, endpoint, pool, target.pod_name, "504", timeout_ms, self.weight)
            raise UpstreamTimeout(service, timeout_ms, origin=f"node:{target.node}")
        if network.partitions and ctx.service != INGRESS and not network.reachable(ctx.zone, target.zone):
            caller.downstream_ms += timeout_ms
            zones = "|".join(sorted((ctx.zone, target.zone)))
            raise UpstreamTimeout(service, timeout_ms, origin=f"network:{zones}")
        policies = self.policies
        if policies.active:
            source, external = caller.container, ctx.service == INGRESS
            # policies.call_allowed's memo read inline, by the same key (most calls are answered there)
            allowed = policies.pairs.get(("" if external else source.pod_uid if source is not None else "?",
                                          target.pod_uid, service))
            if allowed is None:
                allowed = policies.call_allowed(source, external, target, service)
            if not allowed:
                caller.downstream_ms += timeout_ms  # a NetworkPolicy drops the SYN: a connect timeout, no server span
                raise UpstreamTimeout(service, timeout_ms, origin=self._component(ns, service))
        if network.clock_skew and caller.container is not None:
            refused = token_rejection(network.clock_skew, caller.container.node, target.node)
            if refused is not None:  # the callee's token check fails before its handler runs
                caller.downstream_ms += hop
                log_sample(self.samples, ns, service, endpoint, pool, target.pod_name, "401", hop, self.weight)
                self._log_error(target, endpoint, f"WARN {endpoint}: rejected call from {ctx.pod}: {refused}", "token")
                skewed = caller.container.node if network.clock_skew.get(caller.container.node) else target.node
                raise ServiceError(service, 401, refused, origin=f"node:{skewed}")
        uid = target.pod_uid
        shed = self._shed.get(uid)
        if shed and self._rng.random() < shed:  # queued behind work the pod's CPU limit cannot serve
            self._pod_work[uid] += self._mean_work.get(uid, 0.0) * self.weight
            caller.downstream_ms += timeout_ms
            log_sample(self.samples, ns, service, endpoint, pool, target.pod_name, "504", timeout_ms, self.weight)
            raise UpstreamTimeout(service, timeout_ms, origin=self._component(ns, service))
        handler = target.module.ENDPOINTS.get(endpoint) if target.module is not None else None
        frame = _Frame(target)
        stack = self._stack
        stack.append(frame)
        error: Optional[ServiceError] = None
        result: Any = None
        try:
            if handler is None:
                raise ServiceError(service, 404, f"no handler for {endpoint!r}", origin=self._component(ns, service))
            result = handler(target.ctx, payload)
        except ServiceError as exc:
            origin = exc.origin if exc.status != 404 else self._component(ns, service)
            error = ServiceError(service, 500 if exc.status != 404 else 404, str(exc), origin=origin)
            at = self._log_due(target, endpoint)
            if at is not None:
                target.log(at, f"ERROR {endpoint}: upstream call failed: {exc}")
        except Exception as exc:  # noqa: BLE001 - the service's own bug: a 500 with a traceback
            error = ServiceError(service, 500, "Internal Server Error", origin=self._component(ns, service))
            at = self._log_due(target, endpoint, type(exc).__name__)
            if at is not None:  # (the traceback is formatted only for the lines that are logged)
                target.log(at, f"ERROR {endpoint} failed\n{format_exception(exc)}")
            if self._trace is not None:
                self._bug = exc
        finally:
            stack.pop()
        weight = self.weight
        latency = frame.work_ms * self._slowdown.get(uid, 1.0) + frame.downstream_ms + hop
        if network.pod_delay_ms:
            latency += network.pod_delay_ms.get(uid, 0.0)
        if self._trace is not None:  # a traced request: this call's server span
            self._server_span(self._trace, len(stack), target, endpoint, caller, hop, latency, error)
        self._pod_work[uid] += frame.work_ms * weight
        self._pod_requests[uid] += weight
        key = (ns, service, endpoint, target.pod_name, "200" if error is None else _CODES.get(error.status) or
               str(error.status), id(pool))
        logged = self.samples.get(key)  # counts.log_sample, inline: this runs for every call
        if logged is None:
            self.samples[key] = [pool, weight, 1, {latency: weight}]
        else:
            logged[1] += weight
            logged[2] += 1
            lat = logged[3]
            lat[latency] = lat.get(latency, 0.0) + weight
        if latency > timeout_ms:
            caller.downstream_ms += timeout_ms
            raise UpstreamTimeout(service, timeout_ms, origin=error.origin if error else self._component(ns, service))
        caller.downstream_ms += latency
        if error is not None:
            try:
                raise error
            finally:  # the traceback holds this frame: a frame still holding the error is a cycle for the GC
                error = None
        return result if isinstance(result, dict) else {"value": result}

    # -- tracing (only within a traced request: see twin/tracing.py) ------------------------
    def _traced(self, call: Callable[[], dict], ctx: Context, namespace: str, service: str, endpoint: str) -> dict:
        """``call`` (to a Service, or to an external API with ``namespace`` "") in a traced
        request. A call no pod answered (no endpoints, connection refused, a node down, a
        partition, DNS, an external's outage) leaves only the caller's client span, as with
        OpenTelemetry's HTTP client instrumentation; one that reached a pod has its server span."""
        trace = self._trace
        assert trace is not None
        caller = self._stack[-1]
        spans, waited = len(trace.raw), caller.downstream_ms
        try:
            return call()
        except ServiceError as exc:
            if len(trace.raw) == spans:
                trace.client_error(len(self._stack), caller.container, namespace, service, endpoint,
                                   caller.work_ms + waited, caller.downstream_ms - waited, exc.status, str(exc))
            raise

    def _server_span(self, trace: ActiveTrace, depth: int, target: Container, endpoint: str, caller: _Frame,
                     hop: float, latency: float, error: Optional[ServiceError]) -> None:
        """A traced call's server span. It starts half a hop after the caller's elapsed time
        (its work and calls so far, which the callee cannot have changed) and lasts the
        server's own time, ``latency - hop``: its work, its calls and any injected pod delay,
        so added latency shows at the pod it was added to."""
        at_ms = caller.work_ms + caller.downstream_ms + hop / 2
        if error is None:
            trace.span(depth, target, endpoint, at_ms, latency - hop)
            return
        bug, self._bug = self._bug, None
        if bug is not None:  # the service's own exception
            trace.span(depth, target, endpoint, at_ms, latency - hop, error.status, f"{type(bug).__name__}: {bug}",
                       type(bug).__name__, format_exception(bug))
            return
        # a failed downstream call: the message the caller's HTTP client raised (``cart: HTTP 500: …``)
        message, prefix = str(error), f"{error.service}: HTTP {error.status}: "
        trace.span(depth, target, endpoint, at_ms, latency - hop, error.status,
                   message[len(prefix):] if message.startswith(prefix) else message)

    def _log_error(self, c: Container, endpoint: str, text: str, key: str = "upstream") -> None:
        at = self._log_due(c, endpoint, key)
        if at is not None:
            c.log(at, text)

    def _log_due(self, c: Container, endpoint: str, key: str = "upstream") -> Optional[datetime]:
        """Count one more error of ``key`` at ``c``'s ``endpoint`` this tick: the time to log its
        line at, or None when the line is not logged (past MAX_TRACEBACKS_PER_TICK, or outside a
        tick), so that a caller builds the line only when it is."""
        k = (c.pod_uid, endpoint, key)
        self._tracebacks[k] += 1
        if self._tracebacks[k] <= MAX_TRACEBACKS_PER_TICK and self._now is not None:
            return self._now
        return None
