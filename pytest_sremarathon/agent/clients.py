"""Agent-side handles for the pipeline and telemetry endpoints (docs/INTERNALS.md).

Plain HTTP with ``urllib`` and a bearer token; one connection per call. They implement
:class:`~pytest_sremarathon.agent.protocol.Pipeline` and
:class:`~pytest_sremarathon.agent.protocol.Telemetry`, so agents never see the difference
between these and any other implementation. A failed call raises
:class:`~pytest_sremarathon.agent.protocol.PipelineError` /
:class:`~pytest_sremarathon.agent.protocol.TelemetryError` carrying the server's message
(policy denials are HTTP 403: ``err.denied``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from typing import Any, Optional

from .protocol import Change, PipelineError, ServiceError, TelemetryError

__all__ = ["PipelineClient", "TelemetryClient"]

PREFIX = "/sremarathon/v1"
MAX_BODY = 64 * 1024 * 1024


def _server_message(body: bytes, fallback: str) -> str:
    """The human message in an error body: Kubernetes ``Status.message``, ``error``/``detail``
    fields, or the text itself."""
    text = body.decode("utf-8", "replace").strip()
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        for key in ("message", "error", "detail", "reason"):
            value = doc.get(key)
            if isinstance(value, str) and value.strip():
                return value.strip()
    return (text[:2000] or fallback).replace("\n", " ")


class _HttpClient:
    error: type[ServiceError] = ServiceError

    def __init__(self, server: str, token: str, *, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self._token = token
        self.timeout = timeout
        # Loopback endpoints: never route through a proxy from the environment.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:  # never show the token
        return f"{type(self).__name__}({self.server!r})"

    def _request(self, method: str, path: str, *, query: Optional[dict[str, str]] = None,
                 body: Optional[dict[str, Any]] = None) -> Any:
        url = self.server + PREFIX + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self._token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        where = f"{method} {PREFIX}{path}"
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read(MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            try:
                raw_err = exc.read(1024 * 1024)
            except Exception:  # noqa: BLE001
                raw_err = b""
            finally:
                exc.close()
            raise self.error(_server_message(raw_err, f"{exc.code} {exc.reason}"), exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise self.error(f"{where}: server unreachable: {reason}") from None
        if len(raw) > MAX_BODY:
            raise self.error(f"{where}: answer larger than {MAX_BODY} bytes")
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise self.error(f"{where}: answer is not JSON") from None


def _app_path(app: str, what: str) -> str:
    return f"/pipeline/{urllib.parse.quote(app, safe='')}/{what}"


class PipelineClient(_HttpClient):
    """:class:`~pytest_sremarathon.agent.protocol.Pipeline` over HTTP."""

    error = PipelineError

    def changes(self, app: str) -> list[Change]:
        doc = self._request("GET", _app_path(app, "changes"))
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise PipelineError(f"GET {PREFIX}{_app_path(app, 'changes')}: answer has no 'items' list")
        try:
            return [Change.model_validate(item) for item in items]
        except ValueError as exc:
            raise PipelineError(f"malformed change in answer: {str(exc).splitlines()[0]}") from None

    def revert(self, app: str, change_id: str) -> Change:
        doc = self._request("POST", _app_path(app, "revert"), body={"change": change_id})
        try:
            return Change.model_validate(doc)
        except ValueError as exc:
            raise PipelineError(f"malformed revert answer: {str(exc).splitlines()[0]}") from None

    def deploy(self, app: str, ref: str) -> dict[str, Any]:
        doc = self._request("POST", _app_path(app, "deploy"), body={"ref": ref})
        return doc if isinstance(doc, dict) else {"result": doc}

    def status(self, app: str) -> dict[str, Any]:
        doc = self._request("GET", _app_path(app, "status"))
        return doc if isinstance(doc, dict) else {"result": doc}


def _iso(t: datetime) -> str:
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_time(value: str) -> datetime:
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


class TelemetryClient(_HttpClient):
    """:class:`~pytest_sremarathon.agent.protocol.Telemetry` over HTTP."""

    error = TelemetryError

    def metrics(self, app: str, service: str, name: str,
                since: datetime | None = None) -> list[tuple[datetime, float]]:
        query = {"app": app, "service": service, "name": name}
        if since is not None:
            query["since"] = _iso(since)
        doc = self._request("GET", "/telemetry/metrics", query=query)
        series = doc.get("series") if isinstance(doc, dict) else None
        if not isinstance(series, list):
            raise TelemetryError(f"GET {PREFIX}/telemetry/metrics: answer has no 'series' list")
        try:
            return [(_parse_time(t), float(v)) for t, v in series]
        except (TypeError, ValueError):
            raise TelemetryError(f"GET {PREFIX}/telemetry/metrics: malformed series point") from None
