"""What the exec shell sees of a container: the integration contract with the twin.

The twin implements :class:`ContainerView` for a pod's container (its environment from the
manifest and ConfigMaps, the files it mounts, its processes, the virtual time and a view of the
cluster network); the shell never reaches past it. :class:`StaticContainer` is a ready-made
implementation from plain values plus network callbacks, for tests and for a twin that prefers
to fill in fields.

Network calls may raise :class:`NetworkError`: the kind of failure decides the tools' exit codes
and messages (curl 6/7/28, wget's, nc's), the ``seconds`` how much virtual time it cost.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal, Optional, Protocol

FailureKind = Literal["resolve", "refused", "unreachable", "timeout", "reset"]


class NetworkError(Exception):
    """A failed network operation.

    ``resolve``: the name does not exist (NXDOMAIN); ``timeout`` from :meth:`ContainerView.resolve`
    means no DNS server answered (a DNS outage). ``refused``: nothing listens (or a Service has no
    ready endpoints: kube-proxy rejects). ``unreachable``: no route. ``timeout``: packets are
    dropped (a partition) or the answer takes longer than the caller's limit. ``reset``: the peer
    closed mid-exchange (curl 56, "Recv failure"). ``seconds``: virtual time until the failure
    showed (for a black hole with no caller limit use ``float('inf')``; the tools then apply their
    own defaults)."""

    def __init__(self, kind: FailureKind, message: str = "", seconds: float = 0.0) -> None:
        super().__init__(message or kind)
        self.kind: FailureKind = kind
        self.message = message
        self.seconds = seconds


@dataclass(frozen=True)
class Process:
    """One line of ``ps``. ``time`` is the CPU time busybox shows (``M:SS``)."""

    pid: int
    command: str
    user: str = "root"
    time: str = "0:00"


@dataclass(frozen=True)
class HttpRequest:
    """A request a tool sends: ``url`` as given on the command line (scheme, host, optional
    port, path and query), ``headers`` in order (the tool's defaults included), ``timeout`` the
    caller's limit in seconds (None: none)."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""
    timeout: Optional[float] = None


@dataclass(frozen=True)
class HttpResponse:
    """The answer. ``reason`` defaults to the standard phrase; ``seconds`` is the virtual time
    the exchange took (added latency shows here; a tool with a limit below it times out)."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    seconds: float = 0.0
    http_version: str = "1.1"


class ContainerView(Protocol):
    """The container an exec runs in. Properties may be plain attributes.

    ``env``: the process environment in the order ``env`` prints it (PATH, HOSTNAME, the
    manifest's and ConfigMaps' variables, the Service link variables, HOME). ``files``: absolute
    path -> content of every file the container has that the shell may read (image files such as
    ``/etc/hostname``, ``/etc/resolv.conf``, ``/etc/passwd``, ``/etc/os-release``; the config
    files; ConfigMap and Secret volumes as the kubelet lays them out); directories are implied by
    the paths, plus ``dirs`` for empty ones. They are read-only: a write to one of these paths
    fails, writes elsewhere live only for the exec. ``processes``: the container's processes
    (PID 1 first); the shell adds itself. ``uid``: the user the exec runs as. ``commands``:
    the programs the image has (None: all the shell knows); others exit 127 ``not found``.
    ``now()``: the virtual time.

    Two optional attributes, read with ``getattr``: ``workdir`` (the image's working directory,
    where the shell starts; default ``/``) and ``aliases`` (program name -> the applet that plays
    it, e.g. ``{"bash": "sh"}`` for an image that ships bash: the shell runs it as ash)."""

    @property
    def hostname(self) -> str: ...

    @property
    def env(self) -> Mapping[str, str]: ...

    @property
    def files(self) -> Mapping[str, bytes]: ...

    @property
    def dirs(self) -> AbstractSet[str]: ...

    @property
    def processes(self) -> Sequence[Process]: ...

    @property
    def uid(self) -> int: ...

    @property
    def commands(self) -> Optional[AbstractSet[str]]: ...

    def now(self) -> datetime: ...

    def resolve(self, name: str) -> Optional[str]:
        """The IPv4 address ``name`` resolves to from this container (the cluster DNS with the
        pod's search path: ``cart``, ``cart.shop``, ``cart.shop.svc.cluster.local``), None if
        it does not exist; raises ``NetworkError('timeout')`` if DNS does not answer."""
        ...

    def connect(self, host: str, port: int, timeout: Optional[float]) -> float:
        """Open (and close) a TCP connection to ``host`` (a name or an address): the seconds it
        took, or ``NetworkError`` (``resolve``, ``refused``, ``unreachable``, ``timeout``)."""
        ...

    def http(self, request: HttpRequest) -> HttpResponse:
        """Send ``request`` through the cluster network (Services, pods, partitions, DNS
        outages and latency apply): the response, or ``NetworkError``. Plain HTTP only: an
        ``https`` URL the twin cannot serve should fail as the network would."""
        ...


def _no_http(request: HttpRequest) -> HttpResponse:
    raise NetworkError("refused", "connection refused")


def _no_connect(host: str, port: int, timeout: Optional[float]) -> float:
    raise NetworkError("refused", "connection refused")


_EPOCH = datetime(2024, 1, 1, tzinfo=timezone.utc)


@dataclass
class StaticContainer:
    """A :class:`ContainerView` from values. ``hosts`` maps names to addresses for
    :meth:`resolve` (exact names; the twin's own view applies the search path);
    ``http_handler``/``connect_handler`` stand for the network (default: nothing listens)."""

    hostname: str = "localhost"
    env: Mapping[str, str] = field(default_factory=dict)
    files: Mapping[str, bytes] = field(default_factory=dict)
    dirs: AbstractSet[str] = frozenset()
    processes: Sequence[Process] = ()
    uid: int = 0
    commands: Optional[AbstractSet[str]] = None
    time: datetime = _EPOCH
    hosts: Mapping[str, str] = field(default_factory=dict)
    dns_down: bool = False
    http_handler: Callable[[HttpRequest], HttpResponse] = _no_http
    connect_handler: Callable[[str, int, Optional[float]], float] = _no_connect
    workdir: str = "/"
    aliases: Mapping[str, str] = field(default_factory=dict)

    def now(self) -> datetime:
        return self.time

    def resolve(self, name: str) -> Optional[str]:
        if self.dns_down:
            raise NetworkError("timeout", "connection timed out; no servers could be reached", seconds=5.0)
        return self.hosts.get(name.rstrip("."))

    def connect(self, host: str, port: int, timeout: Optional[float]) -> float:
        return self.connect_handler(host, port, timeout)

    def http(self, request: HttpRequest) -> HttpResponse:
        return self.http_handler(request)
