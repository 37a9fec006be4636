"""The records of a run, as written to ``events.jsonl`` (README: What a run records).

Every line of ``events.jsonl`` is one :class:`Event` envelope serialised by :func:`canonical`;
``prev`` is the SHA-256 of the previous *line* (without its newline), so the file is a hash
chain whose head is the hash of its last line. ``data`` follows the model named by ``type`` in
:data:`EVENT_DATA`. Events carry virtual time only: two runs with the same seed and the same
agent decisions write byte-identical files.

Records whose type starts with ``truth.`` are ground truth (what the orchestrator knows and the
agent must not): they are what the scorer reads besides the agent's reports. The agent never
sees the run directory, so writing them as the run goes keeps a killed run scorable.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .agent.protocol import Alert, Report

GENESIS = "0" * 64
#: Record types the scorer reads; everything else is ignored (and a bundle opened for scoring
#: may drop the rest from memory).
SCORED_TYPES = frozenset({"run.start", "run.end", "agent.step", "action", "truth.fault",
                          "truth.fault_end", "truth.alert", "truth.mitigation", "truth.effect"})


def canonical(obj: Any) -> str:
    """The one JSON spelling used for hashing: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_hex(data: str | bytes) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha256(data).hexdigest()


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seq: int
    t: str  # virtual time, ISO-8601 UTC
    type: str
    data: dict[str, Any]
    prev: str


class Segment(_Data):
    name: str
    start: str
    end: str


class RunStart(_Data):
    scenario: str
    scenario_digest: str
    seed: int
    agent: str
    backend: str
    apps: list[str]
    start: str
    end: str
    tick_seconds: float
    cadence_seconds: float
    segments: list[Segment]
    ground_truth_commitment: str  # sha256(salt || canonical(schedule)), revealed at seal
    # The scoring rules the records are written for (scoring.SCORING_VERSION); bundles from
    # before version 2 lack the key.
    scoring_version: int = 1
    # What the agent's thinking costs (thinktime.py): frozen | per-request:SECONDS | wall:FACTOR;
    # bundles from before issue 14 lack it (they were frozen, and deployed at once).
    think_time: str = "frozen"
    # How builds take time: "instant", or the per-app build durations drawn for this run
    # ({"model": "lognormal", "seconds": {app: s}, "jitter": sd}).
    builds: Optional[dict[str, Any]] = None


class RunEnd(_Data):
    reason: Literal["completed", "interrupted", "error"]
    steps: int
    error: Optional[str] = None


class AgentStep(_Data):
    """One agent step, recorded when it ended (its findings are made then). In the charged
    think-time models the step took virtual time: it began at ``started`` (it was due at ``due``;
    later when the previous step overran), cost ``virtual_seconds`` for ``requests`` charged
    requests, and ``overrun_seconds`` says how far it ran past the next step's due time (that
    step is delayed: steps never overlap)."""

    step: int
    outcome: Literal["ok", "error", "timeout", "invalid", "dead", "limit"]  # limit: agent.memory_limit … crossed
    error: Optional[str] = None
    report: Optional[Report] = None
    started: Optional[str] = None
    due: Optional[str] = None
    virtual_seconds: Optional[float] = None
    requests: Optional[int] = None
    overrun_seconds: Optional[float] = None


class Action(_Data):
    """One mutating request by the agent (or the orchestrator), after the policy decision."""

    actor: Literal["agent", "orchestrator"]
    channel: Literal["kube", "pipeline"]
    id: Optional[str] = None  # "act-00042": what truth.effect and truth.mitigation refer to
    verb: str
    target: str  # e.g. "apps/v1/namespaces/shop/deployments/cart" or "pipeline/shop/revert"
    app: Optional[str] = None
    allowed: bool
    rule: Optional[str] = None  # the policy rule that denied it
    status: int  # HTTP-like status of the outcome
    detail: Optional[str] = None


class ExecSession(_Data):
    """One ``kubectl exec`` or ``kubectl attach`` session of the agent, written when it ended;
    the ``action`` record with id ``action`` was written when it started (the policy point)."""

    action: Optional[str] = None
    verb: Literal["exec", "attach"]
    pod: str  # "<namespace>/<name>"
    container: str
    command: list[str]  # as the client sent it (attach: the container's main process)
    stdin: bool = False
    tty: bool = False
    protocol: str = ""  # the WebSocket subprotocol (v5.channel.k8s.io, v4.channel.k8s.io, ...)
    exit_code: Optional[int] = None  # None: the command could not start (see error)
    error: Optional[str] = None
    stdin_bytes: int = 0
    stdout_bytes: int = 0
    stderr_bytes: int = 0


class ChangeCommitted(_Data):
    actor: Literal["agent", "orchestrator"]
    app: str
    change: dict[str, Any]  # a protocol Change, diff truncated


class Deployed(_Data):
    """A deploy applied to the cluster: its rollout starts now."""

    actor: Literal["agent", "orchestrator"]
    app: str
    ref: str
    commit: str
    artifacts: dict[str, str]  # service -> image digest
    action: Optional[str] = None  # the agent's Action.id that queued it (a build that took time)
    build: Optional[str] = None  # the Build id, when builds take time


class BuildRecord(_Data):
    """A transition of one pipeline build (pipeline/builds.py): queued, building (for
    ``seconds``), deploying (the rollout started: a ``pipeline.deploy`` record too), deployed
    (rolled out), failed, superseded."""

    id: str
    app: str
    actor: Literal["agent", "orchestrator"]
    action: Optional[str] = None
    commit: str
    ref: str
    state: Literal["queued", "building", "deploying", "deployed", "failed", "superseded"]
    at: Optional[str] = None  # when it happened, if earlier than the record (a build that started at
    # the previous one's end)
    seconds: Optional[float] = None
    error: Optional[str] = None
    superseded_by: Optional[str] = None
    workloads: list[str] = Field(default_factory=list)


class AlertTransition(_Data):
    alert: Alert


class SLISample(_Data):
    """Service-level indicators for every service, one record per sample interval."""

    services: dict[str, list[float]]  # "app/service" -> [rps, error_ratio, p99_ms]


class TruthFault(_Data):
    id: str
    kind: str
    app: str
    component: str
    change: Optional[str] = None
    start: str
    planned_end: str
    description: str
    # The blast radius (what collateral is judged against): "<namespace>/<service>" showing
    # symptoms, and the nodes the fault sits on.
    impact: list[str] = Field(default_factory=list)
    nodes: list[str] = Field(default_factory=list)


class TruthFaultEnd(_Data):
    id: str
    how: Literal["cleanup", "run-end"]


class TruthFaultSkipped(_Data):
    """A scheduled fault that could not be injected (e.g. the agent rewrote the code its change
    edits); it is not scored."""

    id: str
    reason: str


class TruthAlert(_Data):
    alert: str
    faults: list[str]  # empty = noise


class TruthMitigation(_Data):
    """A transition of a fault's mitigation condition. On a transition to ``True``, ``by`` says
    whose recorded action put the evidence the condition reads into its present state, and
    ``actions`` lists the agent's actions (``Action.id``) it is attributed to (empty: none)."""

    fault: str
    mitigated: bool
    by: Optional[Literal["agent", "orchestrator"]] = None
    actions: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)  # "<object>#<aspect>" the agent's actions set


class TruthEffect(_Data):
    """What one agent action changed that a mitigation condition can read (a Deployment's pod
    template or replicas, a Service's spec, a ConfigMap's or Secret's data, a node's cordon):
    metadata-only writes and no-op writes make no effect. Collateral is judged from these."""

    action: str  # Action.id
    object: str  # "<Kind>/<namespace>/<name>" ("Node/-/<name>" for cluster-scoped objects)
    aspect: str  # template | replicas | spec | data | unschedulable


class ClusterEvent(_Data):
    """A notable cluster-side change (node down, pod OOMKilled …) for the timeline."""

    reason: str
    object: str
    message: str


EVENT_DATA: dict[str, type[_Data]] = {
    "run.start": RunStart,
    "run.end": RunEnd,
    "agent.step": AgentStep,
    "action": Action,
    "agent.exec": ExecSession,
    "pipeline.change": ChangeCommitted,
    "pipeline.deploy": Deployed,
    "pipeline.build": BuildRecord,
    "alert": AlertTransition,
    "sli": SLISample,
    "cluster": ClusterEvent,
    "truth.fault": TruthFault,
    "truth.fault_end": TruthFaultEnd,
    "truth.fault_skipped": TruthFaultSkipped,
    "truth.alert": TruthAlert,
    "truth.mitigation": TruthMitigation,
    "truth.effect": TruthEffect,
}


def validate_event(ev: Event) -> _Data:
    model = EVENT_DATA.get(ev.type)
    if model is None:
        raise ValueError(f"unknown event type {ev.type!r} at seq {ev.seq}")
    return model.model_validate(ev.data)
