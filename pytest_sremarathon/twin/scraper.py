"""The twin's Prometheus scrape: every scrape interval (the tick), the series a kube-prometheus
stack would hold, appended to the cluster's :class:`~pytest_sremarathon.prometheus.TSDB`.

* every application pod (job = its Service): ``http_requests_total`` and
  ``http_request_duration_seconds`` per endpoint, counted from the tick's handler samples as
  :mod:`.counts` draws them; a datastore pod exports its exporter's series instead
  (``redis_commands_total`` … with connections and the time its commands took);
* cAdvisor per container and kube-state-metrics per object (:mod:`..monitoring.kube_state`);
* ``up`` per target (:mod:`..monitoring.targets`): a pod's target is down while its container
  is not running or its node is down — its series are then not appended, as a failed scrape
  appends nothing.

A pod's counters live as long as its process: a restarted container starts from zero (a
counter reset, which ``rate()`` handles). What the service-level numbers of the
:class:`~pytest_sremarathon.metrics.MetricStore` (requests/s, error ratio, latency quantiles)
say is summed from the same draws.
"""

from __future__ import annotations

import gc
import random
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from itertools import accumulate
from operator import add
from typing import TYPE_CHECKING, Any, Optional

from ..monitoring.catalog import (
    DATASTORES,
    HTTP_DURATION,
    HTTP_REQUESTS,
    LE,
    SLO_P99,
    datastore_flavour,
    datastore_names,
    declare,
)
from ..monitoring.kube_state import KSM_INSTANCE, KSM_JOB, ContainerUsage, KubeState, kubelet_instance
from ..monitoring.targets import ScrapeTargets, TargetState, prometheus_self
from ..prometheus import TSDB
from .counts import OK, CellDraw, CountModel, Groups, Sample, quantiles

if TYPE_CHECKING:
    from ..apps import AppSpec
    from ..k8s.store import Store
    from .kubelet import Container, Kubelet
    from .traffic import Network

DEFAULT_RETENTION = 24 * 3600.0  # the whole default marathon (12 h) and its warm-up
MAX_PENDING = 2880  # ticks recorded before they are applied anyway (a day at 30 s: bounded memory)
KSM_TARGET = TargetState(KSM_JOB, KSM_INSTANCE, "serviceMonitor/monitoring/kube-state-metrics/0",
                         f"http://{KSM_INSTANCE}/metrics", True, (("namespace", "monitoring"),))
PROMETHEUS_TARGET = prometheus_self()


class _Exposition:
    """The counters one process exposes: series refs and current values, by key."""

    __slots__ = ("labels", "refs", "values", "index", "generation", "endpoints", "block")

    def __init__(self, db: TSDB, labels: dict[str, str], generation: int) -> None:
        self.block = db.block()
        self.labels = labels
        self.refs: list[int] = []
        self.values: list[float] = []
        self.index: dict[tuple[str, ...], int] = {}
        self.generation = generation
        # endpoint -> (first bucket, _sum, _count, {code: http_requests_total}) positions
        self.endpoints: dict[str, tuple[int, int, int, dict[str, int]]] = {}

    def slot(self, db: TSDB, key: tuple[str, ...], labels: dict[str, str], width: int = 1) -> int:
        """Position of the series ``key`` (``width`` consecutive series: a histogram's buckets)."""
        i = self.index.get(key)
        if i is None:
            i = self.index[key] = len(self.refs)
            if width == 1:
                self.refs.append(db.ref({**self.labels, **labels}))
            else:
                name = labels["__name__"]
                for le in LE:
                    self.refs.append(db.ref({**self.labels, **labels, "__name__": name, "le": le}))
            self.values.extend([0.0] * width)
        return i

    def reset(self, generation: int) -> None:
        for i in range(len(self.values)):
            self.values[i] = 0.0
        self.generation = generation


@dataclass
class ServiceTraffic:
    """One service's requests in one scrape, summed over its cells."""

    requests: int = 0
    errors: int = 0
    fine: dict[int, float] = field(default_factory=dict)

    def latency_ms(self) -> tuple[float, float]:
        p50, p99 = quantiles(self.fine, (0.5, 0.99))
        return p50, p99


class TwinScraper:
    """Records one cluster's series into ``db`` every :meth:`scrape`."""

    def __init__(self, apps: list[AppSpec], store: Store, kubelet: Kubelet, network: Network,
                 retention: float = DEFAULT_RETENTION, interval: float = 30.0) -> None:
        self.apps = {a.namespace: a for a in apps}
        self.store = store
        self.kubelet = kubelet
        self.network = network
        self.db = TSDB(retention=retention)
        declare(self.db)
        self.model = CountModel(callers={(a.namespace, s): a.callers_of(s) for a in apps for s in a.services})
        self.kube_state = KubeState(self.db)
        self.targets = ScrapeTargets(self.db, interval=f"{interval:g}s")
        self._pods: dict[str, _Exposition] = {}  # pod uid -> its process's counters
        self._no_pod: dict[tuple[str, str], _Exposition] = {}  # (ns, service): calls that reached no pod
        self._cpu: dict[str, list[float]] = {}  # pod uid -> [cpu seconds, restarts at the last reset]
        self._ips: dict[str, str] = {}  # pod uid -> pod IP
        self._target_states: dict[str, tuple[bool, TargetState]] = {}  # pod uid -> (up, its target)
        self._kubelets: dict[tuple[str, bool], TargetState] = {}
        # The ticks recorded, not yet applied to the counters: (time, cells, their counts,
        # processes), and the processes (uid, restarts, up, ns, svc, pod, container, ip, flavour,
        # clients) of the last. A cell is its (uid, ns, svc, endpoint), one tuple for every tick
        # (interned in _wheres); its counts are a run of numbers in the tick's array (see
        # _record_counts): a day of ticks pending costs about 80 bytes a cell, not 400.
        self._pending: list[tuple[float, list[tuple[Any, ...]], array[float], list[tuple[Any, ...]]]] = []
        self._wheres: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._last_procs: list[tuple[Any, ...]] = []
        self._applied_procs: Optional[list[tuple[Any, ...]]] = None
        self.db.before_read = self.apply
        self._flavours: dict[tuple[str, str], str] = {}
        self._clients: dict[tuple[str, str], list[str]] = {}  # datastore -> the services that call it
        self._slo_refs: list[int] = []  # the services' latency objectives (a recording rule's output)
        self._slo_values: list[float] = []
        self._slo_block = self.db.block()
        for ns, app in self.apps.items():
            for svc, spec in app.services.items():
                if spec.slo_p99_ms:
                    self._slo_refs.append(self.db.ref({"__name__": SLO_P99, "namespace": ns, "service": svc}))
                    self._slo_values.append(spec.slo_p99_ms / 1000.0)
                if spec.datastore:
                    self._flavours[(ns, svc)] = datastore_flavour(spec.datastore)
                    self._clients[(ns, svc)] = sorted(s for s, sp in app.services.items() if svc in sp.calls)

    # -- one scrape ----------------------------------------------------------------------------
    def scrape(self, now: datetime, dt: float, rng: random.Random, samples: Groups | Iterable[Sample],
               routable: Optional[dict[tuple[str, str], list[str]]] = None) -> dict[tuple[str, str], ServiceTraffic]:
        """Draw this tick's counts and record every series at ``now``; the per-service sums.

        The request series are recorded lazily: the tick's counts and the processes that
        serve them are kept (compactly) and applied to the counters, in order, when the store
        is next read (``TSDB.before_read``) — what a read sees is the same whenever it reads.
        Everything else is appended now.

        The garbage collector waits until the scrape is done: a scrape makes thousands of
        containers (the draws, the rows) that live until it returns; a collection in between
        frees none of them and promotes them all, and promoted objects are what triggers
        collections of the whole heap (measured: 3 s of CPU over the default marathon)."""
        if not gc.isenabled():
            return self._scrape(now, dt, rng, samples, routable)
        gc.disable()
        try:
            return self._scrape(now, dt, rng, samples, routable)
        finally:
            gc.enable()

    def _scrape(self, now: datetime, dt: float, rng: random.Random, samples: Groups | Iterable[Sample],
                routable: Optional[dict[tuple[str, str], list[str]]]) -> dict[tuple[str, str], ServiceTraffic]:
        containers = self.kubelet.containers
        by_name = self.kubelet.by_name
        node_up = self.network.node_up
        cells = self.model.draw(samples, rng, routable=routable)
        traffic: dict[tuple[str, str], ServiceTraffic] = {}
        wheres = self._wheres
        counted: list[tuple[Any, ...]] = []
        numbers: list[float] = []
        for cell in cells:
            ns, total, codes = cell.namespace, cell.total, cell.codes
            key = (ns, cell.service)
            st = traffic.get(key)
            if st is None:
                st = traffic[key] = ServiceTraffic()
            st.requests += total
            st.errors += total - codes.get(OK, 0)
            fine = st.fine
            for b, count in cell.fine.items():
                fine[b] = fine.get(b, 0.0) + count
            if cell.pod == "":
                uid = None
            else:
                served_by = by_name.get((ns, cell.pod))
                if served_by is None:
                    continue
                uid = served_by.pod_uid
            where = (uid, ns, cell.service, cell.endpoint)
            counted.append(wheres.setdefault(where, where))
            _record_counts(numbers, cell)
        t = now.timestamp()
        targets: list[TargetState] = []
        usage: list[ContainerUsage] = []
        running: dict[tuple[str, str], int] = {}
        for c in containers.values():
            if c.state == "running":
                running[(c.namespace, c.service)] = running.get((c.namespace, c.service), 0) + 1
        procs: list[tuple[Any, ...]] = []
        others: list[str] = []  # a Job's or a node agent's containers: cAdvisor only, no app process
        apps, cpus, ips, flavours = self.apps, self._cpu, self._ips, self._flavours
        target_states, memory_of = self._target_states, self.kubelet.memory_of
        for uid, c in containers.items():
            ns = c.namespace
            app = apps.get(ns)
            if app is None:
                continue
            is_running = c.state == "running"
            up = is_running and node_up.get(c.node, False)
            cpu = cpus.get(uid)
            if cpu is None or cpu[1] != c.restarts:
                cpu = cpus[uid] = [0.0, float(c.restarts)]
            if is_running:
                cpu[0] += c.cpu_millicores * dt / 1000.0
                if up:
                    usage.append(_new_tuple(ContainerUsage, (ns, c.pod_name, c.name, c.node, c.image, cpu[0],
                                                             float(memory_of(c)))))
            svc = c.service
            if svc not in app.services:
                others.append(uid)
                continue
            ip = ips.get(uid) or self._ip(uid, c)
            flavour = flavours.get((ns, svc))
            clients = sum(running.get((ns, s), 0) for s in self._clients[(ns, svc)]) if flavour else 0
            procs.append((uid, c.restarts, bool(up and ip), ns, svc, c.pod_name, c.name, ip, flavour, clients))
            if ip:
                hit = target_states.get(c.pod_uid)  # (_target's own test, inline: the same target most ticks)
                if hit is not None and hit[0] == up:
                    targets.append(hit[1])
                else:
                    port = DATASTORES[flavour][1] if flavour else 8080
                    targets.append(self._target(c, ip, port, up, node_up))
        if len(self._cpu) > len(procs) + len(others):  # (every process is in _cpu: else none is gone)
            live = {p[0] for p in procs} | set(others)
            for uid in [u for u in self._cpu if u not in live]:
                del self._cpu[uid]
                self._ips.pop(uid, None)
                self._target_states.pop(uid, None)
        if procs == self._last_procs:
            procs = self._last_procs  # (one object for the ticks nothing moved)
        self._last_procs = procs
        self._pending.append((t, counted, array("d", numbers), procs))
        if len(self._pending) >= MAX_PENDING:
            self.apply()
        for node in sorted(node_up):
            targets.append(self._kubelet_target(node, bool(node_up[node])))
        targets.append(KSM_TARGET)
        targets.append(PROMETHEUS_TARGET)
        self._slo_block.append(t, self._slo_refs, self._slo_values)
        self.targets.collect(t, targets)
        self.kube_state.collect(t, self.store, usage)
        return traffic

    def apply(self) -> None:
        """Apply the recorded ticks to the processes' counters and append their rows, in order."""
        pending, self._pending = self._pending, []
        self._wheres = {}
        for t, counted, numbers, procs in pending:
            pods = self._pods
            if procs is not self._applied_procs:
                for uid, restarts, _up, ns, svc, pod, container, ip, flavour, _clients in procs:
                    ex = pods.get(uid)
                    if ex is None:
                        port = DATASTORES[flavour][1] if flavour else 8080
                        labels = {"namespace": ns, "service": svc, "pod": pod, "job": svc,
                                  "instance": f"{ip}:{port}" if ip else pod}
                        if not flavour:
                            labels["container"] = container
                        pods[uid] = _Exposition(self.db, labels, restarts)
                    elif ex.generation != restarts:  # a new process: its counters start again
                        ex.reset(restarts)
                live = {p[0] for p in procs}
                for uid in [u for u in pods if u not in live]:
                    del pods[uid]
                self._applied_procs = procs
            at = 0
            for where in counted:
                uid = where[0]
                ex = self._no_pod_exposition(where[1], where[2]) if uid is None else pods.get(uid)
                at = self._count(ex, where, numbers, at)
            for uid, _restarts, up, _ns, _svc, _pod, _container, _ip, flavour, clients in procs:
                if up:
                    ex = pods[uid]
                    if flavour:
                        self._datastore_gauges(ex, flavour, clients)
                    ex.block.append(t, ex.refs, ex.values)
            for ex in self._no_pod.values():
                ex.block.append(t, ex.refs, ex.values)

    def _kubelet_target(self, node: str, up: bool) -> TargetState:
        hit = self._kubelets.get((node, up))
        if hit is None:
            hit = self._kubelets[(node, up)] = TargetState(
                "kubelet", kubelet_instance(node), "serviceMonitor/monitoring/kubelet/1",
                f"https://{kubelet_instance(node)}/metrics/cadvisor", up,
                (("node", node), ("metrics_path", "/metrics/cadvisor")),
                "" if up else f"Get \"https://{kubelet_instance(node)}/metrics/cadvisor\": context deadline exceeded")
        return hit

    # -- counters ------------------------------------------------------------------------------
    def _no_pod_exposition(self, ns: str, svc: str) -> _Exposition:
        ex = self._no_pod.get((ns, svc))
        if ex is None:
            ex = self._no_pod[(ns, svc)] = _Exposition(self.db, {"namespace": ns, "service": svc, "job": svc}, 0)
        return ex

    def _count(self, ex: Optional[_Exposition], where: tuple[Any, ...], numbers: array[float], at: int) -> int:
        """Add one recorded cell ((uid, ns, svc, endpoint), its counts from ``numbers[at]`` on:
        see :func:`_record_counts`) to a process's counters (none: skipped); where the next
        cell's counts start."""
        n_codes = int(numbers[at])
        codes_at = at + 1
        at = codes_at + 2 * n_codes
        first_bucket, n_buckets = int(numbers[at]), int(numbers[at + 1])
        buckets = numbers[at + 2:at + 2 + n_buckets]
        at += 2 + n_buckets
        seconds, total = numbers[at], numbers[at + 1]
        at += 2
        if ex is None:
            return at
        uid, ns, svc, ep = where
        db, values = self.db, ex.values
        flavour = self._flavours.get((ns, svc))
        if flavour is not None and uid is not None:
            prefix, _port, label, commands = DATASTORES[flavour]
            cmd = commands.get(ep, ep)
            commands_name, seconds_name, _, _ = datastore_names(prefix)
            i = ex.slot(db, ("commands", cmd), {"__name__": commands_name, label: cmd})
            values[i] += total
            j = ex.slot(db, ("seconds", cmd), {"__name__": seconds_name, label: cmd})
            values[j] += seconds
            return at
        slots = ex.endpoints.get(ep)
        if slots is None:
            slots = ex.endpoints[ep] = (
                ex.slot(db, ("buckets", ep), {"__name__": HTTP_DURATION + "_bucket", "endpoint": ep}, width=len(LE)),
                ex.slot(db, ("sum", ep), {"__name__": HTTP_DURATION + "_sum", "endpoint": ep}),
                ex.slot(db, ("count", ep), {"__name__": HTTP_DURATION + "_count", "endpoint": ep}), {})
        first, i_sum, i_count, codes = slots
        for k in range(codes_at, codes_at + 2 * n_codes, 2):
            code = _CODE_NAMES[int(numbers[k])]
            slot = codes.get(code)
            if slot is None:
                slot = codes[code] = ex.slot(db, ("requests", ep, code),
                                             {"__name__": HTTP_REQUESTS, "endpoint": ep, "code": code})
            values[slot] += numbers[k + 1]
        # The cumulative buckets that move, in C loops; past the last bucket with requests
        # every one moves by them all.
        lo, mid, hi = first + first_bucket, first + first_bucket + n_buckets, first + len(LE)
        values[lo:mid] = map(add, values[lo:mid], accumulate(buckets))
        if mid < hi:
            moved = sum(buckets)
            values[mid:hi] = [v + moved for v in values[mid:hi]]
        values[i_sum] += seconds
        values[i_count] += total
        return at

    def _datastore_gauges(self, ex: _Exposition, flavour: str, clients: int) -> None:
        prefix = DATASTORES[flavour][0]
        i = ex.slot(self.db, ("up",), {"__name__": f"{prefix}_up"})
        ex.values[i] = 1.0
        _, _, name, extra = datastore_names(prefix)
        i = ex.slot(self.db, ("connections",), {"__name__": name, **extra})
        ex.values[i] = float(clients)

    def _target(self, c: Container, ip: str, port: int, up: bool, node_up: dict[str, bool]) -> TargetState:
        hit = self._target_states.get(c.pod_uid)
        if hit is not None and hit[0] == up:
            return hit[1]
        state = TargetState(c.service, f"{ip}:{port}", f"serviceMonitor/monitoring/{c.service}/0",
                            f"http://{ip}:{port}/metrics", up,
                            (("namespace", c.namespace), ("pod", c.pod_name), ("service", c.service)),
                            "" if up else _down_reason(c, node_up))
        self._target_states[c.pod_uid] = (up, state)
        return state

    def _ip(self, uid: str, c: Container) -> str:
        ip = self._ips.get(uid)
        if ip is None:
            pod: Optional[dict[str, Any]] = self.store.get("Pod", c.namespace, c.pod_name)
            ip = ((pod or {}).get("status") or {}).get("podIP") or ""
            if ip:
                self._ips[uid] = ip
        return ip


# ContainerUsage(...) without the generated __new__'s Python frame (a hundred a scrape): the same tuple.
_new_tuple = tuple.__new__

_CODE_NAMES: list[str] = [OK, "500", "503", "504", "404"]  # status codes by their number in the recorded counts
_CODE_IDS: dict[str, int] = {code: i for i, code in enumerate(_CODE_NAMES)}


def _record_counts(numbers: list[float], cell: CellDraw) -> None:
    """Append one cell's counts to a tick's record: the number of codes, (code's number,
    requests) for each, the first bucket with requests and how many buckets from it to the
    last with any, their requests, the summed latency (s) and the total."""
    codes = cell.codes
    first, last = cell.first, cell.last
    if len(codes) == 1 and last == first + 1:  # most cells: one code, one bucket
        for code, n in codes.items():
            if code in _CODE_IDS:
                numbers.extend((1, _CODE_IDS[code], n, first, 1, cell.buckets[first], cell.seconds, cell.total))
                return
    numbers.append(len(codes))
    for code, n in codes.items():
        i = _CODE_IDS.get(code)
        if i is None:
            i = _CODE_IDS[code] = len(_CODE_NAMES)
            _CODE_NAMES.append(code)
        numbers.extend((i, n))
    if last > first:
        numbers.extend((first, last - first))
        numbers.extend(cell.buckets[first:last])
    else:
        numbers.extend((first, 0))
    numbers.extend((cell.seconds, cell.total))


def _down_reason(c: Container, node_up: dict[str, bool]) -> str:
    if not node_up.get(c.node, False):
        return "context deadline exceeded"
    return "connect: connection refused"
