"""The one test stand-in for the marathon's policy point: the real policy, plus a list of
what was recorded (shared by the twin, kube and agent tests)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_sremarathon.policy import Decision, MutationRequest, Policy


@dataclass
class RecordingAdmission:
    """The real policy, plus a list of what was recorded."""

    policy: Policy = field(default_factory=Policy)
    records: list[tuple[MutationRequest, Decision, int]] = field(default_factory=list)

    def decide(self, req: MutationRequest) -> Decision:
        return self.policy.decide(req)

    def record(self, req: MutationRequest, decision: Decision, status: int) -> None:
        self.records.append((req, decision, status))
