"""What the agent-facing servers of both backends share: the request an extension handler
sees, its response, and the policy point every mutating request passes (:class:`Admission`).

The twin's API server and the kube backend's policy proxy both mount extension handlers
(the ``/sremarathon/v1/`` pipeline and telemetry endpoints) with these types, so the handlers
are written once and know neither backend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, Union

from ..policy import Decision, MutationRequest


class Admission(Protocol):
    def decide(self, req: MutationRequest) -> Decision: ...

    def record(self, req: MutationRequest, decision: Decision, status: int) -> Optional[str]:
        """Record the request; may return the action's id (``act-00042``)."""
        ...


class ExecRecorder(Protocol):
    """What an admission may also offer (the server looks for it with ``getattr``): the outcome
    of an exec or attach session whose request it recorded as ``action`` (its id, or None)."""

    def record_exec(self, action: Optional[str], req: MutationRequest, outcome: dict[str, Any]) -> None: ...


@dataclass
class Request:
    """What an extension handler sees: the authenticated request, body parsed as JSON."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    actor: str
    headers: dict[str, str] = field(default_factory=dict)
    raw_query: str = ""  # the query string as sent (repeated parameters: Prometheus's match[])
    raw_body: bytes = b""  # the body as sent (a form-encoded one is not JSON: ``body`` is None then)


@dataclass
class Response:
    status: int
    body: Union[dict[str, Any], list[Any], str, bytes]  # bytes: already-serialised JSON
    content_type: str = "application/json"


ExtensionHandler = Callable[[Request], Response]

#: The API server's service proxy (``/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/…``):
#: called with the namespace, the Service's name, its port (as the path names it: a number, a
#: port name or "") and the request, whose ``path`` is the path inside the service; None when
#: nothing answers for that Service (the server then says so, as Kubernetes does).
ServiceProxy = Callable[[str, str, str, Request], Optional[Response]]
