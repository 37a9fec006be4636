"""What the parts of the twin's API server share: the request context, write plans, the
``Status`` errors every handler raises, and JSON spelled the one way the server sends it."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Optional

import yaml

from ..k8s.store import ApiError, ResourceType
from . import protobuf

# -- helpers ------------------------------------------------------------------------------------

JSON = "application/json"
SEP = (",", ":")


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=SEP, ensure_ascii=False).encode()


def status_success(code: int = 200, details: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        body["details"] = details
    if code != 200:
        body["code"] = code
    return body


def no_such_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def bad_request(msg: str) -> ApiError:
    return ApiError(400, "BadRequest", msg)


def qualified(rt: ResourceType) -> str:
    return f"{rt.plural}.{rt.group}" if rt.group else rt.plural


def object_not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{qualified(rt)} "{name}" not found', kind=rt.plural, name=name,
                    group=rt.group)


def conflict(rt: ResourceType, name: str, detail: str = "the object has been modified; please apply your changes "
                                                           "to the latest version and try again") -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(rt)} "{name}": {detail}',
                    kind=rt.plural, name=name, group=rt.group)


def truthy(value: Optional[str]) -> bool:
    return (value or "").lower() in ("1", "true", "yes", "t")


def rfc3339nano(t: datetime) -> str:
    t = t.astimezone(timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond * 1000:09d}Z"


class Plan:
    """A write computed under the store lock, to be admitted and then committed."""

    __slots__ = ("after", "valid", "commit", "render")

    def __init__(self, after: Any, valid: Callable[[], bool], commit: Callable[[], tuple[int, bytes]],
                 render: Optional[Callable[[Any], bytes]] = None) -> None:
        self.after = after  # the object as it would be after the change (what admission inspects)
        self.valid = valid  # still applicable? (checked under the lock just before committing)
        self.commit = commit  # do it; returns (HTTP status, response body)
        self.render = render or dumps  # the response body of a dry run


@dataclass
class Ctx:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw_body: bytes
    actor: str
    conn: socket.socket
    release: Callable[[], None] = lambda: None  # let the think-time gate go (a stream, after its start)
    raw_query: str = ""  # the query as sent (``query`` keeps one value per key; exec repeats ``command``)

    @property
    def accept(self) -> str:
        return self.headers.get("accept", "")

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def body(self) -> Any:
        if not self.raw_body:
            return None
        if self.content_type == "application/vnd.kubernetes.protobuf":
            return protobuf.decode(self.raw_body)
        text = self.raw_body.decode("utf-8", "replace")
        try:
            return json.loads(text)
        except ValueError:
            if "yaml" in self.content_type:
                try:
                    return yaml.safe_load(text)
                except yaml.YAMLError as e:
                    raise bad_request(f"error decoding YAML: {e}") from None
            raise bad_request("the body of the request was in an unknown format - accepted media types include: "
                               "application/json, application/yaml") from None


class Stream(Exception):
    """Raised by a handler that has written its own (streamed) response; the connection closes."""


# -- the server ---------------------------------------------------------------------------------


def canonical(v: Any) -> Any:
    """``v`` without nulls and empty maps/lists: equal for Go's typed decoding, so equal here."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            c = canonical(x)
            if c is not None and c != {} and c != []:
                out[k] = c
        return out
    if isinstance(v, list):
        return [canonical(x) for x in v]
    return v
