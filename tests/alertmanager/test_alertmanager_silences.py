"""Silences through the API: matching, lifecycle, validation, and the policy point."""

from __future__ import annotations

import re

import pytest
from am_world import AmWorld, make_world

from pytest_sremarathon.alertmanager import SilenceRequest, Verdict

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")


def silenced(w: AmWorld, **params: str) -> dict[str, list[str]]:
    return {f'{a["labels"]["alertname"]}/{a["labels"].get("namespace", "")}': a["status"]["silencedBy"]
            for a in w.get("/api/v2/alerts", **params)[1] if a["status"]["silencedBy"]}


def test_a_silence_suppresses_the_alerts_it_matches() -> None:
    w = make_world()
    status, body = w.post_silence()
    assert status == 200 and set(body) == {"silenceID"} and UUID.match(body["silenceID"])
    sid = body["silenceID"]
    assert silenced(w) == {"HighErrorRate/shop": [sid], "HighErrorRate/hotel": [sid]}
    states = {a["labels"]["alertname"]: a["status"]["state"] for a in w.get("/api/v2/alerts")[1]}
    assert states == {"HighErrorRate": "suppressed", "KubePodCrashLooping": "active", "LatencySLOBurn": "active"}
    status, got = w.get(f"/api/v2/silence/{sid}")
    assert status == 200 and got == {
        "id": sid, "status": {"state": "active"}, "updatedAt": "2026-01-01T12:00:00.000Z",
        "comment": "investigating", "createdBy": "sre-agent", "endsAt": "2026-01-01T14:00:00.000Z",
        "matchers": [{"isEqual": True, "isRegex": False, "name": "alertname", "value": "HighErrorRate"}],
        "startsAt": "2026-01-01T12:00:00.000Z"}  # a start in the past becomes now, as Alertmanager does


@pytest.mark.parametrize("matcher, expected", [
    ({"name": "namespace", "value": "shop", "isRegex": False}, {"HighErrorRate/shop", "KubePodCrashLooping/shop"}),
    ([{"name": "severity", "value": "critical", "isRegex": False},
      {"name": "namespace", "value": "shop", "isRegex": False, "isEqual": False}], {"HighErrorRate/hotel"}),
    ({"name": "alertname", "value": "High.*|Latency.*", "isRegex": True}, {"HighErrorRate/shop", "HighErrorRate/hotel",
                                                                           "LatencySLOBurn/social"}),
    ([{"name": "alertname", "value": ".+", "isRegex": True},
      {"name": "severity", "value": "crit.*", "isRegex": True, "isEqual": False}],
     {"KubePodCrashLooping/shop", "LatencySLOBurn/social"}),
    ({"name": "service", "value": "check", "isRegex": True}, set()),  # anchored
])
def test_matcher_kinds(matcher: dict | list, expected: set[str]) -> None:
    w = make_world()
    assert w.post_silence(matchers=matcher if isinstance(matcher, list) else [matcher])[0] == 200
    assert set(silenced(w)) == expected


def test_all_matchers_must_match() -> None:
    w = make_world()
    w.post_silence(matchers=[{"name": "alertname", "value": "HighErrorRate", "isRegex": False},
                             {"name": "namespace", "value": "hotel", "isRegex": False}])
    assert set(silenced(w)) == {"HighErrorRate/hotel"}


def test_pending_then_active_then_expired() -> None:
    w = make_world()
    sid = w.post_silence(startsAt="2026-01-01T13:00:00Z", endsAt="2026-01-01T13:30:00Z")[1]["silenceID"]
    assert w.get(f"/api/v2/silence/{sid}")[1]["status"] == {"state": "pending"} and silenced(w) == {}
    w.clock.advance(hours=1, minutes=5)
    assert w.get(f"/api/v2/silence/{sid}")[1]["status"] == {"state": "active"} and len(silenced(w)) == 2
    w.clock.advance(minutes=30)
    assert w.get(f"/api/v2/silence/{sid}")[1]["status"] == {"state": "expired"} and silenced(w) == {}
    w.clock.advance(hours=121)  # expired silences are kept for the retention period (120 h)
    assert w.get(f"/api/v2/silence/{sid}") == (404, None)


def test_update_in_place_or_replace() -> None:
    w = make_world()
    sid = w.post_silence()[1]["silenceID"]
    created = w.get(f"/api/v2/silence/{sid}")[1]
    # an active silence may be extended: same id
    again = w.post_silence(id=sid, startsAt=created["startsAt"], endsAt="2026-01-01T18:00:00Z", comment="longer")
    assert again == (200, {"silenceID": sid})
    assert w.get(f"/api/v2/silence/{sid}")[1]["endsAt"] == "2026-01-01T18:00:00.000Z"
    # other matchers: a new silence replaces it, the old one expires
    replaced = w.post_silence(id=sid, matchers=[{"name": "alertname", "value": "LatencySLOBurn", "isRegex": False}])
    new = replaced[1]["silenceID"]
    assert replaced[0] == 200 and new != sid
    assert w.get(f"/api/v2/silence/{sid}")[1]["status"]["state"] == "expired"
    assert set(silenced(w)) == {"LatencySLOBurn/social"}
    assert w.post_silence(id="0d0e6a6c-2b0a-4d4b-8d5e-1f0c2b3a4d5e") == (404, "silence not found")


def test_list_order_and_filter() -> None:
    w = make_world()
    long = w.post_silence(endsAt="2026-01-01T20:00:00Z")[1]["silenceID"]
    short = w.post_silence(endsAt="2026-01-01T13:00:00Z",
                           matchers=[{"name": "namespace", "value": "shop", "isRegex": False}])[1]["silenceID"]
    later = w.post_silence(startsAt="2026-01-02T00:00:00Z", endsAt="2026-01-02T01:00:00Z")[1]["silenceID"]
    gone = w.post_silence(endsAt="2026-01-01T12:30:00Z")[1]["silenceID"]
    w.clock.advance(minutes=45)
    listed = w.get("/api/v2/silences")[1]
    assert [s["id"] for s in listed] == [short, long, later, gone]  # active by end, pending, expired
    assert [s["status"]["state"] for s in listed] == ["active", "active", "pending", "expired"]
    assert [s["id"] for s in w.get("/api/v2/silences", filter='namespace="shop"')[1]] == [short]
    assert w.get("/api/v2/silences", filter='namespace=~"shop"')[1] == []  # the same matcher, not a match


def test_expire() -> None:
    w = make_world()
    sid = w.post_silence()[1]["silenceID"]
    assert w.api.handle("DELETE", f"/api/v2/silence/{sid}") == (200, None)
    assert w.get(f"/api/v2/silence/{sid}")[1]["status"]["state"] == "expired" and silenced(w) == {}
    assert w.api.handle("DELETE", f"/api/v2/silence/{sid}") == (500, f"silence {sid} already expired")
    assert w.api.handle("DELETE", "/api/v2/silence/0d0e6a6c-2b0a-4d4b-8d5e-1f0c2b3a4d5e") == (404, None)
    assert w.api.handle("DELETE", "/api/v2/silence/not-a-uuid") == (
        422, {"code": 601, "message": 'silenceID in path must be of type uuid: "not-a-uuid"'})


@pytest.mark.parametrize("fields, expected", [
    ({"endsAt": "2026-01-01T10:00:00Z"}, (400, "Failed to create silence: start time must be before end time")),
    ({"startsAt": "2026-01-01T09:00:00Z", "endsAt": "2026-01-01T10:00:00Z"},
     (400, "Failed to create silence: end time can't be in the past")),
    ({"matchers": [{"name": "alertname", "value": ".*", "isRegex": True}]},
     (400, "invalid silence: at least one matcher must not match the empty string")),
    ({"matchers": [{"name": "namespace", "value": "shop", "isRegex": False, "isEqual": False}]},
     (400, "invalid silence: at least one matcher must not match the empty string")),
    ({"matchers": [{"name": "bad-name", "value": "x", "isRegex": False}]},
     (400, 'invalid silence: invalid label matcher 0: invalid label name "bad-name"')),
    ({"matchers": []}, (422, {"code": 612, "message": "matchers in body should have at least 1 items"})),
    ({"matchers": [{"name": "a", "value": "b"}]}, (422, {"code": 602, "message": "matchers.0.isRegex in body is required"})),
    ({"comment": None}, (422, {"code": 602, "message": "comment in body is required"})),
    ({"startsAt": "soon"}, (400, {"code": 400, "message": 'parsing silence body from "" failed, because parsing time '
                                                          '"soon" as "2006-01-02T15:04:05Z07:00": cannot parse'})),
])
def test_validation(fields: dict, expected: tuple) -> None:
    w = make_world()
    assert w.post_silence(**fields) == expected
    assert w.get("/api/v2/silences")[1] == []
    # a request go-openapi refuses never reaches the policy point; one the silence rules refuse does
    assert bool(w.policy.asked) == isinstance(expected[1], str)


def test_malformed_bodies() -> None:
    w = make_world()
    assert w.api.handle("POST", "/api/v2/silences", body=b"") == (
        422, {"code": 602, "message": "silence in body is required"})
    status, body = w.api.handle("POST", "/api/v2/silences", body=b"{nope")
    assert status == 400 and body["message"].startswith('parsing silence body from "" failed, because ')
    assert w.policy.asked == []  # nothing to decide on: answered before the policy point


def test_the_policy_point_denies_and_hears_of_every_decision() -> None:
    w = make_world()
    w.policy.deny = "denied by sremarathon policy rule 'no-silence-alerts': silencing alerts is not a repair"
    assert w.post_silence(actor="agent") == (403, w.policy.deny)
    assert w.get("/api/v2/silences")[1] == [] and silenced(w) == {}
    (req,) = w.policy.asked
    assert (req.verb, req.actor, req.silence_id) == ("create", "agent", None)
    assert req.body["matchers"][0]["value"] == "HighErrorRate"
    assert w.policy.records == [(req, False, 403)]

    w.policy.deny = None
    sid = w.post_silence(actor="operator")[1]["silenceID"]
    assert w.policy.records[-1][1:] == (True, 200)
    w.policy.deny = "no"
    assert w.api.handle("DELETE", f"/api/v2/silence/{sid}", actor="agent") == (403, "no")
    delete = w.policy.asked[-1]
    assert (delete.verb, delete.silence_id, delete.body["id"]) == ("delete", sid, sid)
    assert w.get(f"/api/v2/silence/{sid}")[1]["status"]["state"] == "active"  # still there
    w.policy.deny = None
    assert w.post_silence(id=sid, endsAt="2026-01-01T15:00:00Z")[0] == 200
    assert w.policy.asked[-1].verb == "update"
    assert w.post_silence(endsAt="2026-01-01T09:00:00Z")[0] == 400
    assert w.policy.records[-1][1:] == (True, 400)  # allowed, then refused as invalid: recorded with its status


def test_the_real_policy_point_denies_silences() -> None:
    """The contract with pytest_sremarathon.policy (docs/TRACES-AND-ALERTS.md): its Decision is a
    verdict as it is, and ``no-silence-alerts`` judges any verb on ``silences``."""
    from admission import RecordingAdmission

    from pytest_sremarathon.policy import Decision, MutationRequest, Policy

    admission = RecordingAdmission(Policy())

    def mutation(req: SilenceRequest) -> MutationRequest:
        # no namespace: silences are not objects of the monitoring namespace, and with one
        # protected-namespaces would answer before no-silence-alerts
        return MutationRequest(actor=req.actor, channel="alertmanager", verb=req.verb, resource="silences",
                               name=req.silence_id, body=req.body)

    def decide(req: SilenceRequest) -> Verdict:
        return admission.decide(mutation(req))

    def record(req: SilenceRequest, verdict: Verdict, status: int) -> None:
        assert isinstance(verdict, Decision)  # what decide returned
        admission.record(mutation(req), verdict, status)

    w = make_world()
    w.api.decide, w.api.record = decide, record
    status, message = w.post_silence(actor="agent")
    assert status == 403 and "no-silence-alerts" in message
    assert w.post_silence(actor="orchestrator")[0] == 200  # the policy judges the agent's actions only
    sid = w.get("/api/v2/silences")[1][0]["id"]
    assert w.api.handle("DELETE", f"/api/v2/silence/{sid}", actor="agent")[0] == 403
    assert [(r.actor, r.verb, d.allowed, code) for r, d, code in admission.records] == [
        ("agent", "create", False, 403), ("orchestrator", "create", True, 200), ("agent", "delete", False, 403)]


def test_silence_ids_are_deterministic() -> None:
    runs = [[w.post_silence()[1]["silenceID"] for _ in range(5)] for w in (make_world(), make_world())]
    assert runs[0] == runs[1] and len(set(runs[0])) == 5
