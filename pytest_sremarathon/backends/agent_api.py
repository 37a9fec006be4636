"""The server side of the agent's pipeline and telemetry handles: HTTP endpoints under
``/sremarathon/v1/`` on the same server as the Kubernetes API, behind the same token and the
same policy point."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from ..pipeline.builds import Actor
from ..pipeline.service import PipelineError, Pipelines
from ..policy import Decision, MutationRequest
from ..serving.http import Admission, Request, Response
from ..metrics import MetricStore

PREFIX = "/sremarathon/v1/"


def _error(status: int, message: str) -> Response:
    return Response(status, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                             "code": status})


def _parse_since(value: Optional[str]) -> Optional[datetime]:
    if not value:
        return None
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def make_handler(pipelines: Pipelines, metrics: MetricStore, admission: Admission) -> Callable[[Request], Response]:
    changes_cache: dict[str, tuple[int, list[dict], bytes]] = {}  # app -> (count, JSON form, response)

    def changes_json(app: str) -> bytes:
        """Agents list changes every step: serialise each change once, and the answer once per
        new change, not once per request."""
        changes = pipelines.changes(app)
        seen, items, body = changes_cache.get(app, (0, [], b""))
        if seen != len(changes) or not body:
            items = items + [c.model_dump(mode="json") for c in changes[seen:]]
            body = json.dumps({"items": items}, separators=(",", ":")).encode()
            changes_cache[app] = (len(changes), items, body)
        return body

    def handle(req: Request) -> Response:
        parts = req.path[len(PREFIX):].strip("/").split("/")
        try:
            if parts[0] == "telemetry" and parts[1:] == ["metrics"] and req.method == "GET":
                return _metrics(req)
            if parts[0] == "pipeline" and len(parts) == 3:
                return _pipeline(req, parts[1], parts[2])
        except PipelineError as exc:
            return _error(exc.status, str(exc))
        except (KeyError, ValueError) as exc:
            return _error(400, str(exc).strip("'\""))
        return _error(404, f"no endpoint {req.method} {req.path}")

    def _metrics(req: Request) -> Response:
        q = req.query
        for key in ("app", "service", "name"):
            if not q.get(key):
                raise ValueError(f"query parameter {key!r} is required (app, service, name[, since])")
        series = metrics.series(q["app"], q["service"], q["name"], _parse_since(q.get("since")))
        return Response(200, {"series": [[t.strftime("%Y-%m-%dT%H:%M:%SZ"), v] for t, v in series]})

    def _pipeline(req: Request, app: str, op: str) -> Response:
        actor: Actor = "agent" if req.actor == "agent" else "orchestrator"
        if req.method == "GET" and op == "changes":
            return Response(200, changes_json(app))
        if req.method == "GET" and op == "status":
            return Response(200, pipelines.status(app))
        if req.method != "POST" or op not in ("revert", "deploy"):
            return _error(405 if op in ("revert", "deploy", "changes", "status") else 404,
                          f"{req.method} {op} is not supported")
        body = req.body if isinstance(req.body, dict) else {}
        mreq = MutationRequest(actor=req.actor, channel="pipeline", verb=op, resource="changes" if op == "revert" else "deployments",
                               namespace=app, name=str(body.get("change") or body.get("ref") or ""), app=app, body=body)
        decision: Decision = admission.decide(mreq)
        if not decision.allowed:
            admission.record(mreq, decision, 403)
            return _error(403, decision.message)
        queued: list[Any] = []  # the build(s) this request queued, when builds take time
        try:
            if op == "revert":
                if not body.get("change"):
                    raise ValueError("body needs {'change': '<change id>'}")
                result: Any = pipelines.revert(app, str(body["change"]), actor, queued=queued).model_dump(mode="json")
            else:
                result = pipelines.deploy(app, str(body.get("ref") or "HEAD"), actor, queued=queued)
        except PipelineError as exc:
            admission.record(mreq, decision, exc.status)
            raise
        action = admission.record(mreq, decision, 200)
        if queued:
            # The deploy takes effect when its build is done: provenance expects this action then.
            pipelines.attach_action(queued, action if isinstance(action, str) else None)
        return Response(200, result)

    return handle
