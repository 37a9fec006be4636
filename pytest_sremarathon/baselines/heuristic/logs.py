"""What a failing service's pod logs say: its error chains, its own exceptions, and hints of
machine trouble (slow storage, memory, DNS and timeouts per zone).

The services log failed upstream calls as a chain, ``upstream call failed: checkout: HTTP 500:
payment: HTTP 503: <reason>``: each name is a call edge, the last one is where the failure was
seen, and the reason says what kind of failure it is (:func:`parse_chain`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise

from ..kube_client import KubeClient
from .cluster import Pod, View
from .graph import CallGraph
from .incident import ServiceKey

UPSTREAM = "upstream call failed: "
_CHAIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*): HTTP (\d{3}): ")
_STORE_REPLY = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.-]*): (.*)")
TIMEOUT = re.compile(r"deadline exceeded after (\d+)\s*ms")
_NO_SUCH_HOST = re.compile(r"lookup ([A-Za-z0-9-]+)(?:\.[A-Za-z0-9-]+)*: no such host")
_DNS_TIMEOUT = re.compile(r"lookup \S+ on [\d.]+:53: .*(?:i/o timeout|server misbehaving)")
_EXTERNAL = re.compile(r"\b(?:GET|POST|PUT|PATCH|DELETE) https?://([A-Za-z0-9.-]+)")
_AUTH = re.compile(r"WRONGPASS|NOAUTH|invalid username-password|authentication failed|access denied", re.I)
SLOW_IO = re.compile(r"fsync|slow I/O|device busy|took \d{3,}\s*ms", re.I)
_OOM = re.compile(r"out of memory|OOMKilled", re.I)

#: Lines of evidence text kept per service (what change blame matches diffs against).
_MAX_TEXT = 200


def parse_chain(text: str) -> tuple[tuple[str, ...], str]:
    """``a: HTTP 500: b: HTTP 503: <reason>`` -> (("a", "b"), reason class).

    The reason classes: ``auth`` (a datastore refusing credentials; its name ends the chain),
    ``dns`` (lookups time out), ``nohost`` (a name that does not resolve; it ends the chain),
    ``external`` (a third-party API), ``timeout``, ``unavailable`` (no healthy upstream,
    connection refused) and ``error`` (anything else).
    """
    names: list[str] = []
    pos = 0
    while True:
        m = _CHAIN.match(text, pos)
        if m is None:
            break
        names.append(m.group(1))
        pos = m.end()
    rest = text[pos:]
    m = _STORE_REPLY.match(rest)
    if m and _AUTH.search(m.group(2)):
        if not names or names[-1] != m.group(1):
            names.append(m.group(1))
        return tuple(names), "auth"
    if _AUTH.search(rest):
        return tuple(names), "auth"
    if _DNS_TIMEOUT.search(rest):
        return tuple(names), "dns"
    host = _NO_SUCH_HOST.search(rest)
    if host:
        if not names or names[-1] != host.group(1):
            names.append(host.group(1))
        return tuple(names), "nohost"
    if _EXTERNAL.search(rest):
        return tuple(names), "external"
    if TIMEOUT.search(rest):
        return tuple(names), "timeout"
    if "no healthy upstream" in rest or "connection refused" in rest:
        return tuple(names), "unavailable"
    if m and not names:
        names.append(m.group(1))
    return tuple(names), "error"


@dataclass
class Evidence:
    """What a service's pod logs say about its failures."""

    lines: int = 0
    """Error lines read (chains, tracebacks, ERROR/FATAL lines)."""
    own: int = 0
    """Its own exceptions (tracebacks)."""
    chains: dict[tuple[tuple[str, ...], str], int] = field(default_factory=dict)
    """(names, reason class) -> how often that error chain was logged."""
    timeout_ms: dict[str, int] = field(default_factory=dict)
    """Callee -> the timeout its calls were cut off at."""
    dns_zones: dict[str, int] = field(default_factory=dict)
    """Zone -> DNS failures logged by the service's pods there."""
    timeout_zones: dict[str, int] = field(default_factory=dict)
    """Zone -> timeouts of direct calls logged by the service's pods there."""
    slow_io: int = 0
    oom: int = 0
    text: list[str] = field(default_factory=list)
    """Error text (chains, traceback lines), for change blame."""
    sampled_zones: set[str] = field(default_factory=set)
    """Zones of the ready pods whose logs were read."""

    def add_chain(self, names: tuple[str, ...], reason: str) -> None:
        self.chains[(names, reason)] = self.chains.get((names, reason), 0) + 1

    @property
    def chain_total(self) -> int:
        return sum(self.chains.values())

    def main_chain(self) -> tuple[tuple[str, ...], str]:
        """The most frequent chain (of equals, the first in sort order); there must be one."""
        (names, reason), _ = max(sorted(self.chains.items()), key=lambda kv: kv[1])
        return names, reason


def gather_evidence(kube: KubeClient, view: View, key: ServiceKey, graph: CallGraph, window: int) -> Evidence:
    """Read the logs of a few pods of the service (one per zone, unhealthy ones first, and one
    waiting pod's previous container) over the last ``window`` seconds; learn call edges from
    the chains."""
    app, svc = key
    ev = Evidence()
    pods = sorted(view.pods_of(app, svc), key=lambda p: (p.ready and not p.waiting, p.zone, p.name))
    picked: list[Pod] = []
    for zone in sorted({p.zone for p in pods}):  # one pod per zone, unhealthy ones first
        picked += [p for p in pods if p.zone == zone][:1]
    picked += [p for p in pods if p.waiting and p not in picked][:1]
    known = {s for a, ss in view.services.items() for s in ss}
    for pod in picked[:4]:
        if pod.zone and pod.ready:
            ev.sampled_zones.add(pod.zone)
        text = kube.log(app, pod.name, since_seconds=window)
        if pod.waiting or pod.restarts:
            text += "\n" + kube.log(app, pod.name, since_seconds=window, previous=True)
        read_log(app, svc, pod, text, known, ev, graph)
    if not ev.lines and picked and not graph.callees(app, svc):
        # A quiet leaf (a datastore?): its storage complaints may be older than the window.
        longer = kube.log(app, picked[0].name, since_seconds=4 * window)
        ev.slow_io += sum(1 for line in longer.splitlines() if SLOW_IO.search(line))
    return ev


def read_log(app: str, svc: str, pod: Pod, text: str, known: set[str], ev: Evidence, graph: CallGraph) -> None:
    """Add what one pod's log says to ``ev`` (and the call edges between ``known`` services to
    ``graph``)."""
    in_traceback = False
    for line in text.splitlines()[-600:]:
        if SLOW_IO.search(line):
            ev.slow_io += 1
        if _OOM.search(line):
            ev.oom += 1
        idx = line.find(UPSTREAM)
        if idx >= 0:
            in_traceback = False
            names, reason = parse_chain(line[idx + len(UPSTREAM):])
            if not names:
                continue
            ev.lines += 1
            ev.add_chain(names, reason)
            for a, b in pairwise((svc, *names)):
                if a in known and b in known:
                    graph.add(app, a, b)
            m = TIMEOUT.search(line)
            if m:
                ev.timeout_ms[names[-1]] = int(m.group(1))
                if len(names) == 1:
                    ev.timeout_zones[pod.zone] = ev.timeout_zones.get(pod.zone, 0) + 1
            if reason == "dns" and len(names) == 1:
                ev.dns_zones[pod.zone] = ev.dns_zones.get(pod.zone, 0) + 1
            if len(ev.text) < _MAX_TEXT:
                ev.text.append(line[idx:])
            continue
        if line.startswith("Traceback"):
            in_traceback = True
            ev.own += 1
            ev.lines += 1
            continue
        if in_traceback:
            if len(ev.text) < _MAX_TEXT:
                ev.text.append(line)
            if not line.startswith(" "):
                in_traceback = False
            continue
        if line.startswith(("ERROR", "FATAL", "fatal", "panic")) or _AUTH.search(line):
            ev.lines += 1
            if _AUTH.search(line):
                m = _STORE_REPLY.search(line.split(": ", 1)[-1]) if ": " in line else None
                target = m.group(1) if m else ""
                ev.add_chain((target,) if target else (), "auth")
            if len(ev.text) < _MAX_TEXT:
                ev.text.append(line)
