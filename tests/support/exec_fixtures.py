"""The fake container the exec tests run in: files, environment, processes and a small network
(cart.shop answers; slow.shop is slow; blackhole.shop drops packets; down.shop refuses;
reset.shop resets)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from pytest_sremarathon.exec import HttpRequest, HttpResponse, NetworkError, Process, StaticContainer

HOSTS = {
    "cart": "10.96.0.5", "cart.shop": "10.96.0.5", "cart.shop.svc.cluster.local": "10.96.0.5",
    "slow.shop": "10.96.0.6", "blackhole.shop": "10.96.0.7", "down.shop": "10.96.0.8", "reset.shop": "10.96.0.9",
}


def network(request: HttpRequest) -> HttpResponse:
    """cart.shop:8080 answers (healthz 200, /fail 503, /redirect 302, echo of the request);
    slow.shop takes 3 s; blackhole.shop drops packets; down.shop refuses; reset.shop resets."""
    from urllib.parse import urlsplit
    u = urlsplit(request.url)
    host, port = u.hostname or "", u.port or 80
    if host in ("blackhole.shop", "10.96.0.7"):
        raise NetworkError("timeout", "dropped", seconds=float("inf") if request.timeout is None else request.timeout)
    if host in ("down.shop", "10.96.0.8") or port != 8080 and host != "slow.shop":
        raise NetworkError("refused", "connection refused", seconds=0.001)
    if host == "reset.shop":
        raise NetworkError("reset")
    if host == "slow.shop":
        return HttpResponse(200, b"slow\n", seconds=3.0)
    if u.path == "/healthz":
        return HttpResponse(200, b"ok\n", (("Content-Type", "text/plain"),), seconds=0.002)
    if u.path == "/fail":
        return HttpResponse(503, b'{"error":"unavailable"}\n', (("Content-Type", "application/json"),))
    if u.path == "/redirect":
        return HttpResponse(302, b"", (("Location", "/healthz"),))
    body = f"{request.method} {u.path} {dict(request.headers).get('X-Test', '')} {request.body.decode()}\n"
    return HttpResponse(200, body.encode(), (("Content-Type", "text/plain"),))


def connect(host: str, port: int, timeout: Optional[float]) -> float:
    if host in ("blackhole.shop", "10.96.0.7"):
        raise NetworkError("timeout", seconds=float("inf") if timeout is None else timeout)
    if host in HOSTS and HOSTS[host] == "10.96.0.5" and port == 8080:
        return 0.001
    raise NetworkError("refused", seconds=0.001)


def make_container(**overrides: object) -> StaticContainer:
    values: dict[str, object] = dict(
        hostname="cart-7d9f8b-x2x",
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOSTNAME": "cart-7d9f8b-x2x",
             "DB_URL": "postgres://orders-db:5432/orders", "LOG_LEVEL": "debug",
             "CART_SERVICE_HOST": "10.96.0.5", "CART_SERVICE_PORT": "8080", "HOME": "/root"},
        files={
            "/etc/config/app.yaml": b"port: 8080\nlog_level: debug\ntimeout_ms: 250\n",
            "/etc/config/features.json": b'{"beta": false}\n',
            "/etc/secret/password": b"hunter2",
            "/etc/resolv.conf": b"search shop.svc.cluster.local svc.cluster.local cluster.local\n"
                                b"nameserver 10.96.0.10\noptions ndots:5\n",
            "/etc/hosts": b"127.0.0.1\tlocalhost\n10.244.0.7\tcart-7d9f8b-x2x\n",
            "/etc/passwd": b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/sbin/nologin\n"
                           b"app:x:1000:1000::/home/app:/bin/sh\n",
        },
        processes=[Process(1, "python -m cart --port 8080")],
        time=datetime(2024, 5, 17, 12, 30, 5, tzinfo=timezone.utc),
        hosts=HOSTS, http_handler=network, connect_handler=connect,
    )
    values.update(overrides)
    return StaticContainer(**values)  # type: ignore[arg-type]
