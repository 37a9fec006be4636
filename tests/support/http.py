"""One HTTP request to a server on loopback, with the standard library's client (plain HTTP, or
HTTPS verified against the server's own CA): for what the official clients hide or refuse."""

from __future__ import annotations

import http.client
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(port: int, method: str, path: str, body: Any = None, *, token: Optional[str] = None,
            headers: Optional[Mapping[str, str]] = None, ca_pem: Optional[bytes] = None,
            timeout: float = 10) -> RawResponse:
    """``METHOD path`` to ``127.0.0.1:port``, over TLS when ``ca_pem`` is given. A ``body`` of
    bytes or str is sent as it is, anything else as JSON (``Content-Type: application/json``
    unless ``headers`` say otherwise); ``token`` becomes a bearer ``Authorization``."""
    if ca_pem is not None:
        ctx = ssl.create_default_context(cadata=ca_pem.decode())
        conn: http.client.HTTPConnection = http.client.HTTPSConnection("127.0.0.1", port, context=ctx,
                                                                       timeout=timeout)
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        hdrs.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        return RawResponse(resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read())
    finally:
        conn.close()


def post_json(port: int, endpoint: str, body: Any, timeout: float = 15) -> tuple[int, Any]:
    """A service's ``POST /endpoint`` with a JSON body: (status, the JSON answer; {} if empty)."""
    resp = request(port, "POST", f"/{endpoint}", body, timeout=timeout)
    return resp.status, json.loads(resp.body or b"{}")


def get_text(port: int, path: str, timeout: float = 15) -> tuple[int, str]:
    """``GET path``: (status, the answer as text)."""
    resp = request(port, "GET", path, timeout=timeout)
    return resp.status, resp.body.decode()
