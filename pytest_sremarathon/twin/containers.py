"""The twin's containers seen from inside: what ``kubectl exec`` and ``kubectl attach`` run in, and
the main process of a utility image's container (a debug pod).

:class:`Runtime` is the container runtime the kubelet and the API server share:

* for the kubelet (``kubelet.ContainerRuntime``): it knows the utility images (:mod:`.images`),
  composes a container's environment when it starts (as the kubelet does: the image's, the
  manifest's ``env``/``envFrom`` with ConfigMaps, Secrets, ``fieldRef`` and ``resourceFieldRef``
  resolved and ``$(VAR)`` expanded, the Service link variables), and runs a utility container's
  main process in the exec shell: at once, or, when the container keeps its stdin open
  (``kubectl run -i``), once something attaches;
* for the API server (``api_exec.PodRuntime``): the :class:`TwinContainer` view an exec runs in,
  the attach of a main process, and debug pods started at once when created (so that
  ``kubectl run --rm -i`` needs no tick to see them run).

The view's files are a snapshot taken when the exec starts (image files, the service's artifact,
ConfigMap and Secret volumes at their mount paths, ``/etc/hosts``, ``/etc/resolv.conf``, the
service account files, a little of ``/proc`` and the cgroup); its network is live: names resolve
through the cluster DNS with the pod's search path, connections cross the twin's network
(partitions, down nodes, zone latency, DNS outages) and Services and pods answer through the
apps' real handlers (:meth:`TrafficEngine.serve`), as the runtime's HTTP server answers on a real
cluster (``POST /<endpoint>``, ``/healthz``, ``/readyz``, ``/metrics``, ``/``). Every network
call holds the store lock, the lock a tick holds: an exec's ``curl`` never runs inside a tick.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import ipaddress
import json
import math
import posixpath
import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import TYPE_CHECKING, Any, Optional
from urllib.parse import parse_qsl, urlsplit

from ..exec import (
    ExecFailure,
    ExecOptions,
    HttpRequest,
    HttpResponse,
    InputStream,
    NetworkError,
    OutputStream,
    Process,
    RunFn,
    run_process,
)
from ..exec.shell import BufIn, BufOut
from ..k8s.objects import pod_is_active
from ..k8s.quantity import cpu_millicores, memory_bytes
from ..k8s.store import Store
from ..runtime.code import Artifact, ArtifactStore
from ..serving.http import Request, ServiceProxy
from . import images
from .images import Image
from .traffic import DNS_TIMEOUT_MS, Network, TrafficEngine

if TYPE_CHECKING:
    from .kubelet import Container, Kubelet
    from .scheduler import Scheduler

CLUSTER_DOMAIN = "cluster.local"
DNS_SERVER = "10.96.0.10"
API_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service in `default`
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: What a Secret's value reads as where the policy keeps it from the reader (``no-read-secrets``).
REDACTED = "<redacted: sremarathon policy no-read-secrets>"
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_EXPAND = re.compile(r"\$\$|\$\(([^)]*)\)")
_FOREVER = 1e9  # virtual seconds: "runs until stopped" (sleep infinity, a loop the guard stopped)


# -- the environment ------------------------------------------------------------------------------

@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str
    secret: Optional[str] = None  # the Secret the value comes from (redacted where the policy says)


def _secret_values(secret: Optional[dict[str, Any]]) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for key, value in ((secret or {}).get("data") or {}).items():
        try:
            out[key] = base64.b64decode(str(value))
        except (binascii.Error, ValueError):
            continue
    for key, value in ((secret or {}).get("stringData") or {}).items():
        out[key] = str(value).encode()
    return out


def _configmap_values(cm: Optional[dict[str, Any]]) -> dict[str, bytes]:
    out = {k: str(v).encode() for k, v in ((cm or {}).get("data") or {}).items()}
    for key, value in ((cm or {}).get("binaryData") or {}).items():
        try:
            out[key] = base64.b64decode(str(value))
        except (binascii.Error, ValueError):
            continue
    return out


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def field_value(pod: dict[str, Any], path: str) -> Optional[str]:
    """A downward-API ``fieldRef.fieldPath``."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']*)'\]", path)
    if m:
        return (md.get(m.group(1)) or {}).get(m.group(2))
    if path in ("metadata.labels", "metadata.annotations"):
        items = sorted((md.get(path.split(".")[1]) or {}).items())
        return "".join(f'{k}="{v}"\n' for k, v in items)
    simple = {"metadata.name": md.get("name"), "metadata.namespace": md.get("namespace"),
              "metadata.uid": md.get("uid"), "spec.nodeName": spec.get("nodeName"),
              "spec.serviceAccountName": spec.get("serviceAccountName"), "status.hostIP": status.get("hostIP"),
              "status.podIP": status.get("podIP"),
              "status.podIPs": ",".join(ip.get("ip", "") for ip in status.get("podIPs") or []) or status.get("podIP"),
              "status.hostIPs": ",".join(ip.get("ip", "") for ip in status.get("hostIPs") or [])
              or status.get("hostIP")}
    return simple.get(path)


def resource_value(spec: dict[str, Any], ref: dict[str, Any], allocatable: Mapping[str, str]) -> str:
    """A downward-API ``resourceFieldRef`` (limits default to the node's allocatable)."""
    resource = ref.get("resource", "")
    kind, _, name = resource.partition(".")
    res = spec.get("resources") or {}
    value = (res.get(kind) or {}).get(name)
    if value is None and kind == "limits":
        value = allocatable.get(name)
    if value is None:
        value = "0"
    divisor = str(ref.get("divisor") or "1")
    if name == "cpu":
        d = cpu_millicores(divisor) or 1000
        return str(max(1, math.ceil(cpu_millicores(str(value)) / d)) if cpu_millicores(str(value)) else 0)
    d = memory_bytes(divisor) or 1
    return str(math.ceil(memory_bytes(str(value)) / d))


def service_env(store: Store, namespace: str, links: bool) -> dict[str, str]:
    """The Service link variables the kubelet gives a container: every Service of its
    namespace with a cluster IP (when ``enableServiceLinks``), and the API server's."""
    services: list[tuple[str, str, list[dict[str, Any]]]] = []
    if links:
        for svc in store.list("Service", namespace):
            spec = svc.get("spec") or {}
            ip = spec.get("clusterIP") or ""
            if ip and ip != "None" and spec.get("type") != "ExternalName":
                services.append((svc["metadata"]["name"], ip, list(spec.get("ports") or [])))
    if not any(name == "kubernetes" for name, _, _ in services):
        api = store.get("Service", "default", "kubernetes")
        ip = ((api or {}).get("spec") or {}).get("clusterIP") or API_SERVICE_IP
        services.append(("kubernetes", ip, list(((api or {}).get("spec") or {}).get("ports") or
                                                 [{"name": "https", "port": 443, "protocol": "TCP"}])))
    out: dict[str, str] = {}
    for name, ip, ports in sorted(services):
        if not ports:
            continue
        n = name.upper().replace("-", "_").replace(".", "_")
        first = ports[0]
        proto0 = str(first.get("protocol") or "TCP").lower()
        out[f"{n}_SERVICE_HOST"] = ip
        out[f"{n}_SERVICE_PORT"] = str(first.get("port"))
        for p in ports:
            if p.get("name"):
                out[f"{n}_SERVICE_PORT_{str(p['name']).upper().replace('-', '_')}"] = str(p.get("port"))
        out[f"{n}_PORT"] = f"{proto0}://{ip}:{first.get('port')}"
        for p in ports:
            proto = str(p.get("protocol") or "TCP")
            prefix = f"{n}_PORT_{p.get('port')}_{proto.upper()}"
            out[prefix] = f"{proto.lower()}://{ip}:{p.get('port')}"
            out[f"{prefix}_PROTO"] = proto.lower()
            out[f"{prefix}_PORT"] = str(p.get("port"))
            out[f"{prefix}_ADDR"] = ip
    return out


def _expand(value: str, known: Mapping[str, str]) -> str:
    """The kubelet's ``$(VAR)`` expansion (``$$`` escapes; unknown references stay)."""
    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return known[name] if name in known else m.group(0)
    return _EXPAND.sub(sub, value)


def compose_env(store: Store, pod: dict[str, Any], spec: dict[str, Any], image: Image,
                allocatable: Mapping[str, str], links: Optional[Mapping[str, str]] = None) -> list[EnvVar]:
    """The container's process environment, in the order ``env`` shows it: the image's (PATH
    first), HOSTNAME, ``envFrom`` then ``env`` (later definitions win, keeping the first one's
    place), the Service link variables (``links``: :func:`service_env`'s, made here when not
    given), HOME."""
    ns = pod["metadata"]["namespace"]
    out: dict[str, EnvVar] = {k: EnvVar(k, v) for k, v in image.env}
    out["HOSTNAME"] = EnvVar("HOSTNAME", hostname_of(pod))
    mine: dict[str, EnvVar] = {}
    for source in spec.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        if source.get("configMapRef"):
            values = _configmap_values(store.get("ConfigMap", ns, source["configMapRef"].get("name", "")))
            secret = None
        elif source.get("secretRef"):
            name = source["secretRef"].get("name", "")
            values, secret = _secret_values(store.get("Secret", ns, name)), name
        else:
            continue
        for key in sorted(values):
            if _ENV_NAME.match(prefix + key):
                mine[prefix + key] = EnvVar(prefix + key, _text(values[key]), secret)
    if links is None:
        links = service_env(store, ns, bool((pod.get("spec") or {}).get("enableServiceLinks", True)))
    for env in spec.get("env") or []:
        name = env.get("name")
        if not name:
            continue
        secret = None
        if "valueFrom" not in env:
            known = {**links, **{k: v.value for k, v in mine.items()}}
            value: Optional[str] = _expand(str(env.get("value", "")), known)
        else:
            src = env["valueFrom"] or {}
            if src.get("configMapKeyRef"):
                ref = src["configMapKeyRef"]
                data = _configmap_values(store.get("ConfigMap", ns, ref.get("name", "")))
                value = _text(data[ref["key"]]) if ref.get("key") in data else None
            elif src.get("secretKeyRef"):
                ref = src["secretKeyRef"]
                data = _secret_values(store.get("Secret", ns, ref.get("name", "")))
                value, secret = (_text(data[ref["key"]]) if ref.get("key") in data else None), ref.get("name")
            elif src.get("fieldRef"):
                value = field_value(pod, str(src["fieldRef"].get("fieldPath", "")))
            elif src.get("resourceFieldRef"):
                ref = src["resourceFieldRef"]
                target = next((c for c in (pod.get("spec") or {}).get("containers") or []
                               if c.get("name") == ref.get("containerName")), spec)
                value = resource_value(target, ref, allocatable)
            else:
                value = None
        if value is None:
            continue  # optional and missing (a required one would have kept the container from starting)
        mine[name] = EnvVar(name, value, secret)
    out.update(mine)
    for key, link in links.items():
        if key not in out:  # (the image's and the container's own come first)
            out[key] = _link_var(key, link)
    if "HOME" not in out:
        out["HOME"] = EnvVar("HOME", home_of(image, uid_of(pod, spec, image)))
    return list(out.values())


@functools.lru_cache(maxsize=8192)
def _link_var(name: str, value: str) -> EnvVar:
    """A Service link variable: frozen, so one object serves every container given it (a start
    makes a hundred or more of them)."""
    return EnvVar(name, value)


def hostname_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"])[:63]


def uid_of(pod: dict[str, Any], spec: dict[str, Any], image: Image) -> int:
    for ctx in (spec.get("securityContext") or {}, (pod.get("spec") or {}).get("securityContext") or {}):
        if isinstance(ctx.get("runAsUser"), int):
            return int(ctx["runAsUser"])
    return image.uid


def home_of(image: Image, uid: int) -> str:
    for line in image.passwd.splitlines():
        parts = line.split(":")
        if len(parts) >= 6 and parts[2] == str(uid):
            return parts[5]
    return "/"


# -- the files ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FileData:
    data: bytes
    secret: Optional[str] = None  # the Secret it shows (redacted where the policy says)


def _items(values: dict[str, bytes], items: Optional[list[dict[str, Any]]], secret: Optional[str]) -> dict[str, FileData]:
    if not items:
        return {k: FileData(v, secret) for k, v in values.items()}
    return {str(it.get("path") or it.get("key")): FileData(values[it["key"]], secret)
            for it in items if it.get("key") in values}


def _downward(pod: dict[str, Any], spec: dict[str, Any], items: list[dict[str, Any]],
              allocatable: Mapping[str, str]) -> dict[str, FileData]:
    out: dict[str, FileData] = {}
    for it in items or []:
        if it.get("fieldRef"):
            value = field_value(pod, str(it["fieldRef"].get("fieldPath", "")))
        elif it.get("resourceFieldRef"):
            value = resource_value(spec, it["resourceFieldRef"], allocatable)
        else:
            value = None
        if value is not None and it.get("path"):
            out[str(it["path"])] = FileData(value.encode())
    return out


def _token(pod: dict[str, Any]) -> bytes:
    """A service account token's shape (it authenticates nowhere: the twin never issued it)."""
    md = pod["metadata"]
    sa = (pod.get("spec") or {}).get("serviceAccountName") or "default"
    return service_account_token(md["namespace"], sa, bound={"pod": pod}).encode()


def service_account_token(namespace: str, service_account: str, *, sa_uid: Optional[str] = None,
                          bound: Optional[Mapping[str, dict[str, Any]]] = None,
                          audiences: Optional[Sequence[str]] = None, issued_at: Optional[int] = None,
                          expires_at: Optional[int] = None, token_id: Optional[str] = None) -> str:
    """A service account JWT shaped as the API server's issuer shapes it (``pkg/serviceaccount/
    claims.go``; go-jose writes the claims with sorted keys): the ``kubernetes.io`` claims name
    the account and the objects the token is bound to (``bound``: ``{"pod": pod, "node": node}``,
    or ``{"secret": secret}``). A pod's mounted token and a TokenRequest's (``kubectl create
    token``) are made here; the signature is a digest, not RSA. The optional claims (``exp``,
    ``iat``/``nbf``, ``jti``, the account's uid) appear only when given: a pod's token has none."""

    def b64(obj: Any) -> str:
        text = json.dumps(obj, separators=(",", ":"), sort_keys=True)
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    account: dict[str, Any] = {"name": service_account}
    if sa_uid:
        account["uid"] = sa_uid
    private: dict[str, Any] = {"namespace": namespace, "serviceaccount": account}
    for kind, obj in (bound or {}).items():
        private[kind] = {"name": obj["metadata"]["name"], "uid": obj["metadata"].get("uid")}
    issuer = f"https://kubernetes.default.svc.{CLUSTER_DOMAIN}"
    claims: dict[str, Any] = {"aud": list(audiences or [issuer]), "iss": issuer, "kubernetes.io": private,
                              "sub": f"system:serviceaccount:{namespace}:{service_account}"}
    if issued_at is not None:
        claims["iat"] = claims["nbf"] = issued_at
    if expires_at is not None:
        claims["exp"] = expires_at
    if token_id is not None:
        claims["jti"] = token_id
    header = b64({"alg": "RS256", "kid": "sremarathon-twin"})
    payload = b64(claims)
    sig = base64.urlsafe_b64encode(hashlib.sha256(f"{header}.{payload}".encode()).digest()).decode().rstrip("=")
    return f"{header}.{payload}.{sig}"


def volume_files(store: Store, pod: dict[str, Any], spec: dict[str, Any],
                 allocatable: Mapping[str, str]) -> tuple[dict[str, FileData], set[str]]:
    """The container's mounts as the kubelet lays them out: ``<mountPath>/<key>`` (or an item's
    path; ``subPath`` mounts one file), and the service account files."""
    ns = pod["metadata"]["namespace"]
    volumes = {v.get("name"): v for v in (pod.get("spec") or {}).get("volumes") or []}
    files: dict[str, FileData] = {}
    dirs: set[str] = set()

    def content(vol: dict[str, Any]) -> dict[str, FileData]:
        if vol.get("configMap"):
            src = vol["configMap"]
            return _items(_configmap_values(store.get("ConfigMap", ns, src.get("name", ""))), src.get("items"), None)
        if vol.get("secret"):
            src = vol["secret"]
            name = src.get("secretName", "")
            return _items(_secret_values(store.get("Secret", ns, name)), src.get("items"), name)
        if vol.get("downwardAPI"):
            return _downward(pod, spec, vol["downwardAPI"].get("items") or [], allocatable)
        if vol.get("projected"):
            out: dict[str, FileData] = {}
            for src in vol["projected"].get("sources") or []:
                if src.get("configMap"):
                    cm = src["configMap"]
                    out.update(_items(_configmap_values(store.get("ConfigMap", ns, cm.get("name", ""))),
                                      cm.get("items"), None))
                elif src.get("secret"):
                    s = src["secret"]
                    out.update(_items(_secret_values(store.get("Secret", ns, s.get("name", ""))), s.get("items"),
                                      s.get("name", "")))
                elif src.get("downwardAPI"):
                    out.update(_downward(pod, spec, src["downwardAPI"].get("items") or [], allocatable))
                elif src.get("serviceAccountToken"):
                    out[str(src["serviceAccountToken"].get("path") or "token")] = FileData(_token(pod))
            return out
        return {}  # emptyDir, hostPath, a claim: an (empty) directory

    for mount in spec.get("volumeMounts") or []:
        vol = volumes.get(mount.get("name"))
        path = _abs(str(mount.get("mountPath") or "/"))
        if vol is None:
            continue
        entries = content(vol)
        sub = str(mount.get("subPath") or "").strip("/")
        if sub:
            if sub in entries:
                files[path] = entries[sub]
                continue
            entries = {k[len(sub) + 1:]: v for k, v in entries.items() if k.startswith(sub + "/")}
        dirs.add(path)
        for rel, data in entries.items():
            files[_abs(f"{path}/{rel}")] = data
    automount = (pod.get("spec") or {}).get("automountServiceAccountToken")
    if automount is not False and not any(m.get("mountPath", "").rstrip("/") == SA_DIR
                                          for m in spec.get("volumeMounts") or []):
        files[f"{SA_DIR}/namespace"] = FileData(ns.encode())
        files[f"{SA_DIR}/token"] = FileData(_token(pod))
    return files, dirs


def _abs(path: str) -> str:
    """``path`` made absolute and normal (``normpath`` keeps a leading ``//``)."""
    return posixpath.normpath("/" + path.lstrip("/"))


def etc_hosts(pod: dict[str, Any]) -> bytes:
    """The kubelet-managed ``/etc/hosts``."""
    ip = (pod.get("status") or {}).get("podIP") or ""
    spec = pod.get("spec") or {}
    host = hostname_of(pod)
    lines = ["# Kubernetes-managed hosts file.", "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback",
             "fe00::0\tip6-localnet", "fe00::0\tip6-mcastprefix", "fe00::1\tip6-allnodes", "fe00::2\tip6-allrouters"]
    if ip:
        if spec.get("subdomain"):
            ns = pod["metadata"]["namespace"]
            lines.append(f"{ip}\t{host}.{spec['subdomain']}.{ns}.svc.{CLUSTER_DOMAIN}\t{host}")
        else:
            lines.append(f"{ip}\t{host}")
    aliases = spec.get("hostAliases") or []
    if aliases:
        lines += ["", "# Entries added by HostAliases."]
        lines += [f"{a.get('ip')}\t" + "\t".join(a.get("hostnames") or []) for a in aliases]
    return ("\n".join(lines) + "\n").encode()


def resolv_conf(namespace: str) -> bytes:
    return (f"search {namespace}.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n"
            f"nameserver {DNS_SERVER}\noptions ndots:5\n").encode()


def _cputime(seconds: float) -> str:
    s = int(max(0.0, seconds))
    return f"{s // 60}:{s % 60:02d}"


# -- the main process of a utility container ------------------------------------------------------

@dataclass
class MainProcess:
    """``waiting``: for an attach to bring its stdin; ``running`` until ``ends_at`` (its own
    clock said it sleeps); ``forever`` (a server, ``sleep infinity``, a loop); ``attached``."""

    argv: list[str]
    state: str = "running"
    ends_at: Optional[datetime] = None
    code: int = 0
    stdin_used: bool = False  # stdinOnce: a later start gets no stdin


def main_argv(image: Image, spec: dict[str, Any]) -> list[str]:
    """The main process's argv: the pod's ``command``/``args`` over the image's ENTRYPOINT/CMD,
    through the images' entrypoint scripts (nginx's runs its arguments; curl's puts ``curl`` in
    front of options)."""
    command, args = spec.get("command"), spec.get("args")
    if command:
        argv = [str(a) for a in command] + [str(a) for a in args or []]
    else:
        argv = list(image.entrypoint) + ([str(a) for a in args] if args is not None else list(image.cmd))
    if argv[:1] == ["/docker-entrypoint.sh"]:
        argv = argv[1:]
    elif argv[:1] == ["/entrypoint.sh"]:
        rest = argv[1:]
        known = image.commands or frozenset()
        if not rest or rest[0].startswith("-") or posixpath.basename(rest[0]) not in known | {"sh", "ash"}:
            rest = ["curl"] + rest
        argv = rest
    return argv or ["sh"]


def nginx_startup(now: datetime) -> list[str]:
    stamp = now.strftime("%Y/%m/%d %H:%M:%S")
    return ["/docker-entrypoint.sh: /docker-entrypoint.d/ is not empty, will attempt to perform configuration",
            "/docker-entrypoint.sh: Looking for shell scripts in /docker-entrypoint.d/",
            "/docker-entrypoint.sh: Launching /docker-entrypoint.d/10-listen-on-ipv6-by-default.sh",
            "10-listen-on-ipv6-by-default.sh: info: Getting the checksum of /etc/nginx/conf.d/default.conf",
            "10-listen-on-ipv6-by-default.sh: info: Enabled listen on IPv6 in /etc/nginx/conf.d/default.conf",
            "/docker-entrypoint.sh: Sourcing /docker-entrypoint.d/15-local-resolvers.envsh",
            "/docker-entrypoint.sh: Launching /docker-entrypoint.d/20-envsubst-on-templates.sh",
            "/docker-entrypoint.sh: Launching /docker-entrypoint.d/30-tune-worker-processes.sh",
            "/docker-entrypoint.sh: Configuration complete; ready for start up",
            f'{stamp} [notice] 1#1: using the "epoll" event method',
            f"{stamp} [notice] 1#1: nginx/{images.NGINX_VERSION}",
            f"{stamp} [notice] 1#1: built by gcc 12.2.0 (Debian 12.2.0-14)",
            f"{stamp} [notice] 1#1: OS: Linux 6.1.0-twin",
            f"{stamp} [notice] 1#1: getrlimit(RLIMIT_NOFILE): 1048576:1048576",
            f"{stamp} [notice] 1#1: start worker processes",
            f"{stamp} [notice] 1#1: start worker process 29",
            f"{stamp} [notice] 1#1: start worker process 30"]


class _Tee:
    """An output stream that also keeps what went through it (for the container's log)."""

    def __init__(self, inner: Any, sink: BufOut) -> None:
        self.inner = inner
        self.sink = sink

    def write(self, data: Any) -> int:
        self.sink.write(data)
        return self.inner.write(data) if self.inner is not None else len(data)


class _Attached:
    """The ``run`` of an attach (:meth:`Runtime.attach`); ``exit_code`` is the main process's once
    it ended (None: nothing ran)."""

    def __init__(self, runtime: Runtime, pod: dict[str, Any], c: Container, tty: bool, claim: bool) -> None:
        self.runtime, self.pod, self.c, self.tty, self.claim = runtime, pod, c, tty, claim
        self.exit_code: Optional[int] = None

    def __call__(self, stdin: InputStream, stdout: OutputStream, stderr: OutputStream) -> int:
        if self.claim:
            self.exit_code = self.runtime._run_main(self.pod, self.c, stdin, stdout, stderr, tty=self.tty,
                                                    now=self.runtime.store.clock(), attached=True)
        return 0  # the attach's Status: Success (the kubelet's attach reports no exit code)


# -- the view an exec runs in ---------------------------------------------------------------------

@dataclass
class TwinContainer:
    """:class:`pytest_sremarathon.exec.ContainerView` of one container of the twin."""

    runtime: Runtime
    namespace: str
    pod_name: str
    pod_ip: str
    zone: str
    container: Optional[Container]
    hostname: str
    env: dict[str, str]
    files: dict[str, bytes]
    dirs: frozenset[str]
    processes: list[Process]
    uid: int
    commands: Optional[frozenset[str]]
    workdir: str = "/"
    aliases: dict[str, str] = field(default_factory=dict)
    actor: str = "agent"  # whose exec it is: what a Service answered by ``Runtime.services`` sees
    _requests: int = 0

    def now(self) -> datetime:
        """The container's clock: its node's (``date`` shows a skewed node's time)."""
        skew = self.runtime.network.clock_skew
        now = self.runtime.store.clock()
        node = self.container.node if self.container is not None else ""
        return now + timedelta(seconds=skew[node]) if skew and node in skew else now

    def _rng(self) -> random.Random:
        self._requests += 1
        return random.Random(f"exec:{self.namespace}/{self.pod_name}:{self.now().isoformat()}:{self._requests}")

    def resolve(self, name: str) -> Optional[str]:
        with self.runtime.store.lock:
            return self.runtime.resolve(self, name)

    def connect(self, host: str, port: int, timeout: Optional[float]) -> float:
        with self.runtime.store.lock:
            return self.runtime.destination(self, host, port).seconds

    def http(self, request: HttpRequest) -> HttpResponse:
        with self.runtime.store.lock:
            return self.runtime.http(self, request, self._rng())


@dataclass
class _Dest:
    container: Optional[Container]
    port: int
    seconds: float
    special: str = ""  # "api": the API server's Service


# -- the runtime ----------------------------------------------------------------------------------

class Runtime:
    """The twin's container runtime (see the module docstring). ``agent_secrets(namespace,
    name)`` says whether the agent may read a Secret: the main process of a debug pod, whose
    output the agent reads in its logs, sees the others redacted (the backend sets it from the
    policy)."""

    def __init__(self, store: Store, kubelet: Kubelet, traffic: TrafficEngine, network: Network,
                 scheduler: Scheduler, artifacts: ArtifactStore) -> None:
        self.store = store
        self.kubelet = kubelet
        self.traffic = traffic
        self.network = network
        self.scheduler = scheduler
        self.artifacts = artifacts
        self.agent_secrets: Callable[[str, str], bool] = lambda _ns, _name: True
        # What answers for Services no pod backs (the monitoring namespace's Prometheus): the
        # API server's service proxy, set by the backend.
        self.services: Optional[ServiceProxy] = None
        # service_env per (namespace, enableServiceLinks), with the versions of the Services it
        # was made from (the namespace's and default's, where the API server's is): every
        # container start reads it, and the Services rarely change.
        self._links: dict[tuple[str, bool], tuple[tuple[int, int], dict[str, str]]] = {}
        self._images: dict[str, tuple[Optional[Artifact], Image]] = {}  # image_of's, by reference

    # -- images --------------------------------------------------------------------------------
    def image_of(self, c: Optional[Container], ref: str) -> Image:
        # An image is a pure function of its reference and the artifact built for it (both
        # immutable, the artifact content-addressed), and every container start asks: kept per
        # reference with the artifact it was made from.
        artifact = self.artifacts.by_image(ref)
        kept = self._images.get(ref)
        if kept is not None and kept[0] is artifact:
            return kept[1]
        image = images.utility_image(ref)
        if image is None:
            # a stock image the kubelet serves from DATASTORE_SOURCE, unless one of ours
            image = images.runtime_image(artifact) if artifact is not None else images.datastore_image(ref)
        self._images[ref] = (artifact, image)
        return image

    def _is_datastore(self, c: Container) -> bool:
        """A datastore runs a stock image (no artifact of ours) with the built-in store's code."""
        return c.module is not None and c.main is None and self.artifacts.by_image(c.image) is None

    def _allocatable(self, c: Optional[Container]) -> dict[str, str]:
        node = self.store.get("Node", None, c.node) if c is not None else None
        return dict(((node or {}).get("status") or {}).get("allocatable") or {})

    # -- kubelet side (kubelet.ContainerRuntime) ------------------------------------------------
    def knows(self, image: str) -> bool:
        return images.utility_image(image) is not None

    def started(self, pod: dict[str, Any], spec: dict[str, Any], c: Container) -> None:
        links = self._service_links(pod["metadata"]["namespace"],
                                    bool((pod.get("spec") or {}).get("enableServiceLinks", True)))
        c.env = compose_env(self.store, pod, spec, self.image_of(c, c.image), self._allocatable(c), links)

    def _service_links(self, namespace: str, enabled: bool) -> dict[str, str]:
        """:func:`service_env`, made again only when a Service of the namespace or of
        ``default`` changed (the dict is shared: compose_env only reads it)."""
        versions = (self.store.namespace_version(namespace, "Service")[0],
                    self.store.namespace_version("default", "Service")[0])
        key = (namespace, enabled)
        kept = self._links.get(key)
        if kept is None or kept[0] != versions:
            kept = self._links[key] = (versions, service_env(self.store, namespace, enabled))
        return kept[1]

    def start_main(self, pod: dict[str, Any], spec: dict[str, Any], c: Container, now: datetime) -> None:
        image = self.image_of(c, c.image)
        argv = main_argv(image, spec)
        used = bool(c.main is not None and c.main.stdin_used)
        c.main = MainProcess(argv, stdin_used=used)
        if image.server and posixpath.basename(argv[0]) in ("nginx", "nginx-debug"):
            c.main.state = "forever"
            for line in nginx_startup(now):
                c.log(now, line)
            return
        if spec.get("stdin") and not (spec.get("stdinOnce") and used):
            c.main.state = "waiting"  # its stdin stays open: it runs once something attaches
            return
        self._run_main(pod, c, BufIn(b""), None, None, tty=False, now=now)

    def tick_main(self, pod: dict[str, Any], c: Container, now: datetime) -> None:
        main = c.main
        if main is not None and main.state == "running" and main.ends_at is not None and now >= main.ends_at:
            main.state = "exited"
            self.kubelet.main_exited(pod, c, main.code, now)

    def probe(self, c: Container, probe: dict[str, Any]) -> tuple[bool, str]:
        listens = self._listens(c)
        http, tcp = probe.get("httpGet"), probe.get("tcpSocket")
        port = (http or tcp or {}).get("port")
        if port is not None and not isinstance(port, int):
            spec = self._spec_of(c) or {}
            port = next((p.get("containerPort") for p in spec.get("ports") or [] if p.get("name") == port), None)
        if http is not None:
            if port not in listens:
                return False, f'Get "http://{{pod}}:{port}{http.get("path", "/")}": dial tcp: connect: connection refused'
            if http.get("path", "/") not in ("/", "/index.html"):
                return False, "HTTP probe failed with statuscode: 404"
        elif tcp is not None and port not in listens:
            return False, f"dial tcp :{port}: connect: connection refused"
        return True, ""

    def _run_main(self, pod: dict[str, Any], c: Container, stdin: Any, stdout: Any, stderr: Any, *, tty: bool,
                  now: datetime, attached: bool = False) -> int:
        """Run the main process to its end (or to where it would run on); log its output. An
        attached process ends with its session (what its own clock spent is the session's)."""
        main = c.main
        assert main is not None
        with self.store.lock:
            view = self.view(pod, c, secret_visible=lambda name: self.agent_secrets(c.namespace, name), main=True)
        out = BufOut()
        try:
            end = run_process(view, main.argv, stdin, _Tee(stdout, out), _Tee(stderr, out), tty=tty)
            code, seconds, stopped = end.code, end.seconds, end.stopped
        except ExecFailure as e:  # the program is not in the image: the runtime cannot start it
            out.write(f"{e}\n")
            code, seconds, stopped = 128, 0.0, False
        with self.store.lock:
            if c.main is not main:
                return code  # the pod went away (or restarted) meanwhile
            for line in _text(bytes(out.data)).replace("\r\n", "\n").splitlines():
                c.log(now, line)
            main.code = code
            if stopped or seconds >= _FOREVER:
                main.state = "forever"
            elif seconds >= 1.0 and not attached:
                main.state, main.ends_at = "running", now + timedelta(seconds=seconds)
            else:
                main.state = "exited"
                if self.store.get("Pod", c.namespace, c.pod_name) is pod:
                    self.kubelet.main_exited(pod, c, code, self.store.clock())
        return code

    # -- API server side (api_exec.PodRuntime) ----------------------------------------------------
    def pod_created(self, namespace: str, name: str) -> None:
        """Start a debug pod (a utility image) at once: scheduled and running before the
        create's client looks again, whatever the think-time model."""
        with self.store.lock:
            pod = self.store.get("Pod", namespace, name)
            if pod is None or not pod_is_active(pod):
                return
            containers = (pod.get("spec") or {}).get("containers") or []
            if not containers or not self.knows(str(containers[0].get("image", ""))):
                return
            if not pod["spec"].get("nodeName") and not self.scheduler.schedule(pod):
                return
            if self.network.node_up.get(pod["spec"]["nodeName"], False):
                self.kubelet.start_now(pod)

    def running(self, namespace: str, name: str, container: str) -> tuple[dict[str, Any], Container]:
        """The pod and its running container, or :class:`ExecFailure` with the runtime's words.
        The caller holds the store lock."""
        pod = self.store.get("Pod", namespace, name)
        if pod is None:
            raise ExecFailure("unable to upgrade connection: pod does not exist")
        node = pod["spec"].get("nodeName", "")
        if not self.network.node_up.get(node, False):
            addr = next((a["address"] for a in ((self.store.get("Node", None, node) or {}).get("status") or {})
                         .get("addresses", []) if a.get("type") == "InternalIP"), node)
            raise ExecFailure(f"error dialing backend: dial tcp {addr}:10250: i/o timeout")
        c = self.kubelet.containers.get(pod["metadata"]["uid"])
        first = ((pod.get("spec") or {}).get("containers") or [{}])[0].get("name")
        if c is None or c.state != "running" or (container != first and container != c.name):
            raise ExecFailure(f'unable to upgrade connection: container not found ("{container}")')
        return pod, c

    def exec_view(self, namespace: str, name: str, container: str,
                  secret_visible: Callable[[str], bool], actor: str = "agent") -> TwinContainer:
        with self.store.lock:
            pod, c = self.running(namespace, name, container)
            return self.view(pod, c, secret_visible=secret_visible, container=container, actor=actor)

    def attach(self, namespace: str, name: str, container: str, options: ExecOptions,
               secret_visible: Callable[[str], bool]) -> tuple[RunFn, list[str]]:
        """The ``run`` of an attach to the container's main process, and that process's argv.
        A utility container waiting for its stdin runs now, with the client's streams; any
        other process goes on without showing anything new (its output is in its log). An
        attach ends in ``Success`` whatever the process's exit code, as the kubelet's does: the
        code is the container's (its terminated state), which ``kubectl run`` reads from the pod.
        The run's ``exit_code`` attribute holds it afterwards. The process shows the Secrets the
        agent may read (``agent_secrets``), whoever attaches: its output is in the pod's log."""
        with self.store.lock:
            pod, c = self.running(namespace, name, container)
            main = c.main
            if main is not None:
                argv = list(main.argv)
            else:
                artifact = self.artifacts.by_image(c.image)
                argv = (list(images.runtime_image(artifact).entrypoint) if artifact is not None
                        else images.datastore_process(c.image).split())
            claim = main is not None and main.state == "waiting" and options.stdin
            if main is not None and claim:
                main.state, main.stdin_used = "attached", True
        return _Attached(self, pod, c, options.tty, claim), argv

    # -- the view ----------------------------------------------------------------------------------
    def _spec_of(self, c: Container) -> Optional[dict[str, Any]]:
        pod = self.store.get("Pod", c.namespace, c.pod_name)
        return ((pod or {}).get("spec") or {}).get("containers", [None])[0] if pod else None

    def view(self, pod: dict[str, Any], c: Container, *, secret_visible: Callable[[str], bool],
             container: Optional[str] = None, main: bool = False, actor: str = "agent") -> TwinContainer:
        """The exec view of container ``container`` (default: the first) of ``pod``, whose
        runtime state is ``c``. Call with the store lock held."""
        specs = (pod.get("spec") or {}).get("containers") or []
        inits = (pod.get("spec") or {}).get("initContainers") or []  # (an init container's own run)
        spec = next((s for s in specs + inits if s.get("name") == container), specs[0] if specs else {})
        image = self.image_of(c, str(spec.get("image", "")))
        allocatable = self._allocatable(c)
        ns = pod["metadata"]["namespace"]
        env_vars = c.env if (c.env is not None and spec is specs[0]) else compose_env(
            self.store, pod, spec, image, allocatable)

        def shown(value: str, secret: Optional[str]) -> str:
            return REDACTED if secret is not None and not secret_visible(secret) else value

        env = {v.name: shown(v.value, v.secret) for v in env_vars}
        uid = uid_of(pod, spec, image)
        files: dict[str, bytes] = {path: data for path, data in image.files}
        files["/etc/passwd"] = image.passwd.encode()
        files["/etc/group"] = image.group.encode()
        files["/etc/hostname"] = (hostname_of(pod) + "\n").encode()
        files["/etc/hosts"] = etc_hosts(pod)
        files["/etc/resolv.conf"] = resolv_conf(ns)
        files[_abs(str(spec.get("terminationMessagePath") or "/dev/termination-log"))] = b""
        mounted, dirs = volume_files(self.store, pod, spec, allocatable)
        for path, fd in mounted.items():
            files[path] = fd.data if fd.secret is None or secret_visible(fd.secret) else (REDACTED + "\n").encode()
        processes = self._processes(c, image, spec, main)
        now = self.store.clock()
        uptime = (now - c.started_at).total_seconds() if c.started_at else 0.0
        cmdline = processes[0].command.split() if processes else []
        files["/proc/1/cmdline"] = ("\0".join(cmdline) + "\0").encode() if cmdline else b""
        files["/proc/1/comm"] = ((posixpath.basename(cmdline[0]) if cmdline else "") + "\n").encode()
        files["/proc/uptime"] = f"{uptime:.2f} {uptime * 1.7:.2f}\n".encode()
        files["/proc/version"] = (b"Linux version 6.1.0-twin (sremarathon@twin) (gcc (Debian 12.2.0-14) 12.2.0) "
                                  b"#1 SMP PREEMPT_DYNAMIC Debian 6.1.0-twin\n")
        mem_total = memory_bytes(allocatable.get("memory")) or 16 * 2**30
        files["/proc/meminfo"] = (f"MemTotal:       {mem_total // 1024:>8} kB\n"
                                  f"MemFree:        {mem_total // 2048:>8} kB\n"
                                  f"MemAvailable:   {mem_total * 3 // 4096:>8} kB\n").encode()
        limit = memory_bytes(((spec.get("resources") or {}).get("limits") or {}).get("memory"))
        cpu_limit = cpu_millicores(((spec.get("resources") or {}).get("limits") or {}).get("cpu"))
        files["/sys/fs/cgroup/memory.max"] = (f"{limit}\n" if limit else "max\n").encode()
        files["/sys/fs/cgroup/memory.current"] = f"{self.kubelet.memory_of(c) or 4 * 2**20}\n".encode()
        files["/sys/fs/cgroup/cpu.max"] = (f"{cpu_limit * 100} 100000\n" if cpu_limit else "max 100000\n").encode()
        status = pod.get("status") or {}
        return TwinContainer(
            runtime=self, namespace=ns, pod_name=pod["metadata"]["name"], pod_ip=status.get("podIP") or "",
            zone=c.zone, container=c, hostname=hostname_of(pod), env=env, files=files,
            dirs=frozenset(dirs) | frozenset(image.dirs) | {"/proc/1"},
            processes=processes, uid=uid, commands=image.commands, workdir=str(spec.get("workingDir") or image.workdir),
            aliases=dict(image.aliases), actor=actor)

    def _processes(self, c: Container, image: Image, spec: dict[str, Any], main: bool) -> list[Process]:
        user = next((line.split(":")[0] for line in image.passwd.splitlines()
                     if line.split(":")[2:3] == [str(image.uid)]), str(image.uid))
        now = self.store.clock()
        cpu_seconds = (c.cpu_millicores / 1000.0) * ((now - c.started_at).total_seconds() if c.started_at else 0.0)
        if c.main is not None:
            if main:
                return []  # the process being started is PID 1 itself
            if image.server == "nginx" and c.main.state == "forever" and c.main.argv[:1] == ["nginx"]:
                return [Process(1, "nginx: master process nginx -g daemon off;", "root", "0:00"),
                        Process(29, "nginx: worker process", "nginx", "0:00"),
                        Process(30, "nginx: worker process", "nginx", "0:00")]
            if c.main.state in ("waiting", "running", "forever", "attached"):
                return [Process(1, " ".join(c.main.argv), user, "0:00")]
            return []
        if self._is_datastore(c):
            return [Process(1, images.datastore_process(c.image), user, _cputime(cpu_seconds))]
        return [Process(1, " ".join(image.entrypoint) or c.name, user, _cputime(cpu_seconds))]

    # -- the network ------------------------------------------------------------------------------
    def resolve(self, src: TwinContainer, name: str) -> Optional[str]:
        """``name`` from ``src``'s pod: the cluster DNS with its search path (ndots 5)."""
        if src.zone in self.network.dns_broken_zones:
            raise NetworkError("timeout", "connection timed out; no servers could be reached",
                               seconds=DNS_TIMEOUT_MS / 1000.0)
        name = name.strip().lower()
        absolute = name.endswith(".")
        name = name.rstrip(".")
        if not name:
            return None
        if _is_ip(name):
            return name
        search = [f"{src.namespace}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]
        if absolute:
            candidates = [name]
        elif name.count(".") < 5:
            candidates = [f"{name}.{d}" for d in search] + [name]
        else:
            candidates = [name] + [f"{name}.{d}" for d in search]
        for fqdn in candidates:
            ip = self._lookup(fqdn)
            if ip is not None:
                return ip
        return None

    def _lookup(self, fqdn: str) -> Optional[str]:
        parts = fqdn.split(".")
        suffix = f".svc.{CLUSTER_DOMAIN}"
        if fqdn.endswith(suffix):
            head = fqdn[: -len(suffix)].split(".")
            if len(head) == 2:
                return self._service_ip(head[1], head[0])
            if len(head) == 3:
                host, sub, ns = head
                for pod in self.store.list("Pod", ns):
                    spec = pod.get("spec") or {}
                    if spec.get("hostname") == host and spec.get("subdomain") == sub and pod_is_active(pod):
                        return (pod.get("status") or {}).get("podIP") or None
            return None
        if fqdn.endswith(f".pod.{CLUSTER_DOMAIN}") and len(parts) == 5:
            ip = parts[0].replace("-", ".")
            return ip if _is_ip(ip) else None
        return None

    def _service_ip(self, ns: str, name: str) -> Optional[str]:
        svc = self.store.get("Service", ns, name)
        if svc is None:
            return API_SERVICE_IP if (ns, name) == ("default", "kubernetes") else None
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return None  # a CNAME to a name outside the cluster: nothing resolves it here
        ip = spec.get("clusterIP") or ""
        if ip and ip != "None":
            return ip
        ready = sorted(a.get("ip", "") for s in (self.store.get("Endpoints", ns, name) or {}).get("subsets") or []
                       for a in s.get("addresses") or [])
        return ready[0] if ready else None

    def destination(self, src: TwinContainer, host: str, port: int) -> _Dest:
        """Where a TCP connection from ``src`` to ``host:port`` lands (or NetworkError)."""
        ip = host if _is_ip(host) else None
        if ip is None:
            if host.lower() in ("localhost", "localhost.localdomain"):
                ip = "127.0.0.1"
            else:
                ip = self.resolve(src, host)
        if ip is None:
            raise NetworkError("resolve", f"could not resolve {host}")
        if ip.startswith("127.") or ip == "::1" or (src.pod_ip and ip == src.pod_ip):
            return self._to(src, src.container, port, local=True)
        if ip == API_SERVICE_IP and self.store.get("Service", "default", "kubernetes") is None:
            if port == 443:
                return _Dest(None, port, 0.001, special="api")
            raise NetworkError("timeout", "no route", seconds=math.inf)
        for svc in self.store.list("Service"):
            spec = svc.get("spec") or {}
            if spec.get("clusterIP") == ip:
                return self._via_service(src, svc, port)
        for pod in self.store.list("Pod"):
            if (pod.get("status") or {}).get("podIP") == ip and pod_is_active(pod):
                return self._to(src, self.kubelet.containers.get(pod["metadata"]["uid"]), port)
        if any(a.get("address") == ip for n in self.store.list("Node")
               for a in (n.get("status") or {}).get("addresses") or []):
            raise NetworkError("refused", "connection refused", seconds=0.001)
        raise NetworkError("timeout", "no host answers", seconds=math.inf)

    def _via_service(self, src: TwinContainer, svc: dict[str, Any], port: int) -> _Dest:
        ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
        sport = next((p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("port") == port), None)
        if sport is None:
            raise NetworkError("timeout", f"{name}: no such port", seconds=math.inf)  # no rule: dropped
        ready: list[Container] = []
        for subset in (self.store.get("Endpoints", ns, name) or {}).get("subsets") or []:
            for addr in subset.get("addresses") or []:
                c = self.kubelet.containers.get((addr.get("targetRef") or {}).get("uid", ""))
                if c is not None and c.state == "running":
                    ready.append(c)
        if not ready and self.services is not None and not (svc.get("spec") or {}).get("selector"):
            # no pod backs it, something answers for it (the monitoring namespace's Prometheus)
            return _Dest(None, port, self.network.hop_ms(src.zone, src.zone) / 1000.0, special=f"service:{ns}/{name}")
        if not ready:  # kube-proxy rejects: the Service has no ready endpoints
            raise NetworkError("refused", f"{name} has no endpoints", seconds=0.001)
        ready.sort(key=lambda c: c.pod_name)
        local = [c for c in ready if c.zone == src.zone]
        rng = random.Random(f"svc:{ns}/{name}:{src.pod_name}:{self.store.clock().isoformat()}:{src._requests}")
        target = rng.choice(local or ready)  # same zone first, as the apps' calls go
        tport = sport.get("targetPort", port)
        if not isinstance(tport, int):
            spec = self._spec_of(target) or {}
            tport = next((p.get("containerPort") for p in spec.get("ports") or [] if p.get("name") == tport), -1)
        return self._to(src, target, int(tport))

    def _to(self, src: TwinContainer, c: Optional[Container], port: int, local: bool = False) -> _Dest:
        if c is None or c.state != "running":
            raise NetworkError("refused", "connection refused", seconds=0.001)
        if not local:
            if not self.network.node_up.get(c.node, True):
                raise NetworkError("timeout", f"node {c.node} does not answer", seconds=math.inf)
            if not self.network.reachable(src.zone, c.zone):
                raise NetworkError("timeout", f"{src.zone} and {c.zone} are partitioned", seconds=math.inf)
            if not self.traffic.policies.connection_allowed(src.namespace, src.pod_name, c, port):
                raise NetworkError("timeout", "dropped by a NetworkPolicy", seconds=math.inf)
        if port not in self._listens(c):
            raise NetworkError("refused", "connection refused", seconds=0.001)
        seconds = 0.00005 if local else self.network.hop_ms(src.zone, c.zone) / 1000.0
        return _Dest(c, port, seconds)

    def _listens(self, c: Container) -> set[int]:
        if c.state != "running":
            return set()
        if c.main is not None:
            image = self.image_of(c, c.image)
            return set(image.listens) if image.server and c.main.state == "forever" else set()
        if self._is_datastore(c):
            return set(images.datastore_image(c.image).listens)
        return {8080} if c.module is not None else set()

    def http(self, src: TwinContainer, req: HttpRequest, rng: random.Random) -> HttpResponse:
        u = urlsplit(req.url)
        scheme = (u.scheme or "http").lower()
        try:
            port = u.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise NetworkError("refused", "bad port") from None
        dest = self.destination(src, u.hostname or "", port)
        now = self.store.clock()
        if dest.special == "api":
            if scheme == "https":
                raise NetworkError("reset", "TLS: the twin's API server is not reachable from pods", seconds=dest.seconds)
            return _response(400, b"Client sent an HTTP request to an HTTPS server.\n", "text/plain; charset=utf-8",
                             now, dest.seconds)
        if scheme == "https":  # a TLS client hello to a plain-HTTP server
            raise NetworkError("reset", "TLS handshake with a plain-HTTP server", seconds=dest.seconds)
        if dest.special.startswith("service:"):
            return self._proxied(src, dest, req, u.path or "/", u.query, now)
        c = dest.container
        assert c is not None
        path = (u.path or "/") + (f"?{u.query}" if u.query else "")
        if c.main is not None:
            return self._nginx(src, c, req, path, now, dest.seconds)
        if self._is_datastore(c):
            raise NetworkError("reset", "the datastore does not speak HTTP", seconds=dest.seconds)
        return self._app(c, req, path, now, dest.seconds, rng)

    def _proxied(self, src: TwinContainer, dest: _Dest, req: HttpRequest, path: str, query: str,
                 now: datetime) -> HttpResponse:
        """A Service no pod backs, answered by :attr:`services` as the API server's service proxy
        answers it (the exec's actor is the caller: the monitoring services' policy applies)."""
        assert self.services is not None
        ns, name = dest.special[len("service:"):].split("/", 1)
        headers = {k.lower(): v for k, v in req.headers}
        body: Any = None
        if req.body and not headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            try:
                body = json.loads(req.body)
            except ValueError:
                body = None
        resp = self.services(ns, name, str(dest.port), Request(req.method.upper(), path,
                                                               dict(parse_qsl(query, keep_blank_values=True)), body,
                                                               src.actor, headers, raw_query=query, raw_body=req.body))
        if resp is None:
            raise NetworkError("refused", f"nothing answers for {ns}/{name}:{dest.port}", seconds=dest.seconds)
        if isinstance(resp.body, (bytes, bytearray)):
            data = bytes(resp.body)
        elif isinstance(resp.body, str) and not resp.content_type.startswith("application/json"):
            data = resp.body.encode()
        else:
            data = json.dumps(resp.body, separators=(",", ":")).encode()
        return _response(resp.status, data, resp.content_type, now, dest.seconds, head=req.method.upper() == "HEAD",
                         server="")

    def _app(self, c: Container, req: HttpRequest, path: str, now: datetime, seconds: float,
             rng: random.Random) -> HttpResponse:
        """What ``python -m pytest_sremarathon.runtime`` answers (runtime/server.py)."""
        method = req.method.upper()
        route = path.split("?", 1)[0]
        delay = self.network.pod_delay_ms.get(c.pod_uid, 0.0)
        plain = "text/plain; charset=utf-8"
        if method in ("GET", "HEAD"):
            if route in ("/healthz", "/livez"):
                return _response(200, b"ok", plain, now, seconds + delay / 1000, head=method == "HEAD")
            if route == "/readyz":
                ok, why, ms = self.traffic.ready(c, rng, now)
                return _response(200 if ok else 503, b"ok" if ok else f"not ready: {why}".encode(), plain, now,
                                 seconds + (ms + delay) / 1000, head=method == "HEAD")
            if route == "/metrics":
                return _response(200, self._metrics(c).encode(), "text/plain; version=0.0.4; charset=utf-8", now,
                                 seconds, head=method == "HEAD")
            if route == "/":
                artifact = self.artifacts.by_image(c.image)
                about = {"app": c.app, "service": c.service, "digest": artifact.digest if artifact else "",
                         "pod": c.pod_name, "endpoints": sorted(getattr(c.module, "ENDPOINTS", {}) or {})}
                return _json(200, about, now, seconds, head=method == "HEAD")
            return _json(404, {"error": f"no route GET {route}"}, now, seconds, head=method == "HEAD")
        if method != "POST":
            body = (f'<!DOCTYPE HTML>\n<html lang="en">\n    <head>\n        <meta charset="utf-8">\n'
                    f'        <title>Error response</title>\n    </head>\n    <body>\n        <h1>Error response</h1>\n'
                    f'        <p>Error code: 501</p>\n        <p>Message: Unsupported method (\'{method}\').</p>\n'
                    f'        <p>Error code explanation: 501 - Server does not support this operation.</p>\n'
                    f'    </body>\n</html>\n').encode()
            return _response(501, body, "text/html;charset=utf-8", now, seconds)
        try:
            payload = json.loads(req.body) if req.body.strip() else {}
        except ValueError:
            return _json(400, {"error": "the request body is not valid JSON"}, now, seconds)
        if not isinstance(payload, dict):
            return _json(400, {"error": "the request body must be a JSON object",
                               "origin": f"service:{c.namespace}/{c.service}"}, now, seconds)
        status, answer, ms = self.traffic.serve(c, route.strip("/"), payload, rng, now)
        return _json(status, answer, now, seconds + ms / 1000.0)

    def _metrics(self, c: Container) -> str:
        labels = f'app="{c.app}",service="{c.service}"'
        artifact = self.artifacts.by_image(c.image)
        cache = len(c.ctx.cache_dict) if c.ctx else 0
        lines = ["# HELP sremarathon_ready The last readiness check (1 ready, 0 not).",
                 "# TYPE sremarathon_ready gauge", f"sremarathon_ready{{{labels}}} {int(c.ready)}",
                 "# HELP sremarathon_cache_entries Entries the code retains.",
                 "# TYPE sremarathon_cache_entries gauge", f"sremarathon_cache_entries{{{labels}}} {cache}",
                 "# HELP sremarathon_build_info The artifact this process runs.",
                 "# TYPE sremarathon_build_info gauge",
                 f'sremarathon_build_info{{{labels},digest="{artifact.digest if artifact else ""}"}} 1',
                 "# HELP process_resident_memory_bytes Resident set size.",
                 "# TYPE process_resident_memory_bytes gauge",
                 f"process_resident_memory_bytes {self.kubelet.memory_of(c)}"]
        return "\n".join(lines) + "\n"

    def _nginx(self, src: TwinContainer, c: Container, req: HttpRequest, path: str, now: datetime,
               seconds: float) -> HttpResponse:
        method = req.method.upper()
        route = path.split("?", 1)[0]
        extra: tuple[tuple[str, str], ...] = ()
        if method in ("GET", "HEAD") and route in ("/", "/index.html"):
            status, body = 200, images.NGINX_INDEX
            extra = (("Last-Modified", "Tue, 26 Nov 2024 15:55:00 GMT"), ("ETag", '"6745ef54-267"'),
                     ("Accept-Ranges", "bytes"))
        else:
            status = 405 if method not in ("GET", "HEAD") else 404
            title = "405 Not Allowed" if status == 405 else "404 Not Found"
            body = (f"<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n"
                    f"<hr><center>nginx/{images.NGINX_VERSION}</center>\r\n</body>\r\n</html>\r\n").encode()
        agent = next((v for k, v in req.headers if k.lower() == "user-agent"), "-")
        c.log(now, f'{src.pod_ip or "127.0.0.1"} - - [{now.strftime("%d/%b/%Y:%H:%M:%S +0000")}] '
                   f'"{method} {path} HTTP/1.1" {status} {len(body) if method != "HEAD" else 0} "-" "{agent}" "-"')
        return _response(status, body, "text/html", now, seconds, head=method == "HEAD", extra=extra,
                         server=f"nginx/{images.NGINX_VERSION}")


def _is_ip(s: str) -> bool:
    try:
        ipaddress.ip_address(s)
        return True
    except ValueError:
        return False


def _response(status: int, body: bytes, ctype: str, now: datetime, seconds: float, *, head: bool = False,
              extra: Sequence[tuple[str, str]] = (), server: str = "sremarathon-runtime/1") -> HttpResponse:
    stamp = format_datetime(now.astimezone(timezone.utc).replace(microsecond=0), usegmt=True)
    headers = ([("Server", server)] if server else []) + [("Date", stamp), ("Content-Type", ctype),
                                                          ("Content-Length", str(len(body)))]
    headers += list(extra)
    return HttpResponse(status, b"" if head else body, tuple(headers), seconds=seconds)


def _json(status: int, obj: Any, now: datetime, seconds: float, *, head: bool = False) -> HttpResponse:
    return _response(status, json.dumps(obj, separators=(",", ":"), default=str).encode(), "application/json", now,
                     seconds, head=head)

