"""AgentHost against real worker processes and a real HTTP endpoint (no mocks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from pytest_sremarathon.agent.clients import PipelineClient, TelemetryClient
from pytest_sremarathon.agent.protocol import (
    Alert,
    EnvironmentWire,
    ObservationWire,
    PipelineError,
    TelemetryError,
)
from pytest_sremarathon.agent_host import AgentHost, AgentSpec, detect_isolation
from pytest_sremarathon.clock import EPOCH, iso

TOKEN = "tok-" + "9" * 20


# --- a tiny pipeline/telemetry endpoint --------------------------------------------------------


def _change(cid, app, service, minutes, kind="code"):
    return {"id": cid, "app": app, "service": service, "kind": kind, "author": "dev@example.com",
            "message": f"change {cid}", "time": iso(EPOCH + timedelta(minutes=minutes)), "diff": "--- a\n+++ b\n"}


CHANGES = {
    "shop": [_change("c1", "shop", "cart", 1), _change("c2", "shop", "web", 3),
             _change("c3", "shop", "cart", 5, "config"), _change("c9", "shop", "cart", 500)],
    "frozen": [_change("c-denied", "frozen", "api", 1)],
}


class _Handler(BaseHTTPRequestHandler):
    server: Endpoint

    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, code, doc):
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method):
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.calls.append((method, url.path, body))
        if self.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(401, {"kind": "Status", "status": "Failure", "message": "Unauthorized", "code": 401})
        parts = url.path.strip("/").split("/")
        if parts[:3] == ["sremarathon", "v1", "pipeline"] and len(parts) == 5:
            app, what = parts[3], parts[4]
            if app not in CHANGES:
                return self._send(404, {"kind": "Status", "message": f"no application {app!r}", "code": 404})
            if (method, what) == ("GET", "changes"):
                return self._send(200, {"items": CHANGES[app]})
            if (method, what) == ("POST", "revert"):
                cid = body["change"]
                if app == "frozen":
                    return self._send(403, {"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                                            "message": f"policy rule 'freeze-window' denies reverting {cid}"})
                orig = next(c for c in CHANGES[app] if c["id"] == cid)
                rev = dict(orig, id=f"r-{cid}", message=f"Revert {cid}", author="agent", time=iso(EPOCH + timedelta(hours=1)))
                self.server.reverts.append((app, cid))
                return self._send(200, rev)
            if (method, what) == ("POST", "deploy"):
                return self._send(200, {"app": app, "ref": body["ref"], "status": "deployed"})
            if (method, what) == ("GET", "status"):
                return self._send(200, {"app": app, "deployed": "abc123", "head": "abc123", "services": {"cart": "sha256:1"}})
        if url.path == "/sremarathon/v1/telemetry/metrics" and method == "GET":
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            if q.get("name") == "nonsense":
                return self._send(400, {"message": "unknown metric 'nonsense'"})
            self.server.metric_queries.append(q)
            return self._send(200, {"series": [[iso(EPOCH), 0.25], [iso(EPOCH + timedelta(seconds=30)), 0.5]]})
        return self._send(404, {"message": f"no route {method} {url.path}"})

    def do_GET(self):
        self._handle("GET")

    def do_POST(self):
        self._handle("POST")


class Endpoint(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls, self.reverts, self.metric_queries = [], [], []

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def endpoint():
    srv = Endpoint()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


# --- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path):
    """A run directory like the marathon's: ground truth, kubeconfig and the workspace inside."""
    run = tmp_path / "run"
    (run / "workspace").mkdir(parents=True)
    (run / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    return run


def make_host(endpoint, run_dir, agent=None, cmd=None, **kw) -> AgentHost:
    env = EnvironmentWire(workspace=str(run_dir / "workspace"), kubeconfig=str(run_dir / "kubeconfig"),
                          apps=["shop"], cadence_seconds=60, server=endpoint.url, token=TOKEN)
    spec = AgentSpec(agent=f"agents_for_tests:{agent}") if agent else AgentSpec(cmd=tuple(cmd))
    kw.setdefault("step_budget", 10.0)
    kw.setdefault("hide", [run_dir])
    return AgentHost(spec, env, stderr_path=run_dir.parent / "agent-stderr.log", **kw)


def alert(aid, status="firing", minutes=10, **labels):
    return Alert(id=aid, name="HighErrorRate", status=status, severity="critical",
                 labels={"app": "shop", "service": "cart", **labels},
                 annotations={"summary": "errors"}, starts_at=EPOCH + timedelta(minutes=minutes),
                 ends_at=None if status == "firing" else EPOCH + timedelta(minutes=minutes + 5))


def obs(step, alerts=(), new=None):
    alerts = list(alerts)
    return ObservationWire(time=EPOCH + timedelta(minutes=step), step=step, alerts=alerts,
                           new_alerts=alerts if new is None else list(new))


def stderr_text(run_dir):
    return (run_dir.parent / "agent-stderr.log").read_text()


# --- tests -------------------------------------------------------------------------------------


def test_ok_round_trip_exercises_clients_and_scrubs_the_environment(endpoint, run_dir, monkeypatch):
    monkeypatch.setenv("SREMARATHON_TEST_SECRET", "do-not-leak")
    with make_host(endpoint, run_dir, "EchoAgent") as host:
        assert host.start().outcome == "ok"
        out = host.step(obs(1, [alert("a1")]))
        assert out.outcome == "ok", out.error
        assert out.wall_seconds > 0
        notes = json.loads(out.report.notes)
        assert out.report.findings[0].cause == "change:c1"
        assert notes["alerts"] == ["a1"] and notes["changes"] == ["c1", "c2", "c3", "c9"]
        assert notes["head"] == "abc123" and notes["deploy"] == "deployed"
        assert notes["series"][1][1] == 0.5
        assert notes["denied"].startswith("403 policy rule 'freeze-window' denies")
        ws = str((run_dir / "workspace").resolve())
        assert notes["cwd"] == ws and notes["home"] == ws and notes["workspace"] == ws
        assert notes["kubeconfig"] == str((run_dir / "kubeconfig").resolve())
        assert notes["kubeconfig_text"].startswith("apiVersion")
        assert set(notes["env_keys"]) <= {"PATH", "HOME", "LANG", "KUBECONFIG", "TMPDIR", "PYTHONPATH",
                                          "PYTHONIOENCODING", "PYTHONUNBUFFERED", "LC_CTYPE"}
        assert not any(TOKEN in a for a in notes["argv"])
        # a second step reuses the same process (setup ran once)
        out2 = host.step(obs(2, [alert("a1"), alert("a2")], new=[alert("a2")]))
        assert json.loads(out2.report.notes)["setups"] == 1
        assert json.loads(out2.report.notes)["new"] == ["a2"]
        assert out2.record(2).outcome == "ok" and out2.record(2).report.findings
    assert endpoint.metric_queries[0]["since"] == iso(EPOCH + timedelta(minutes=1))
    assert all(c[0] in ("GET", "POST") for c in endpoint.calls)


def test_clients_raise_with_the_server_message(endpoint):
    pipeline, telemetry = PipelineClient(endpoint.url, TOKEN), TelemetryClient(endpoint.url, TOKEN)
    with pytest.raises(PipelineError) as err:
        pipeline.revert("frozen", "c-denied")
    assert err.value.status == 403 and err.value.denied
    assert "policy rule 'freeze-window' denies reverting c-denied" in str(err.value)
    with pytest.raises(PipelineError, match="no application 'nope'"):
        pipeline.changes("nope")
    with pytest.raises(PipelineError, match="Unauthorized"):
        PipelineClient(endpoint.url, "wrong").status("shop")
    with pytest.raises(TelemetryError, match="unknown metric 'nonsense'"):
        telemetry.metrics("shop", "cart", "nonsense")
    with pytest.raises(PipelineError, match="unreachable"):
        PipelineClient("http://127.0.0.1:9", TOKEN, timeout=2).status("shop")
    assert TOKEN not in repr(pipeline)


def test_raising_agent_is_an_error_and_the_marathon_goes_on(endpoint, run_dir):
    with make_host(endpoint, run_dir, "RaisingAgent") as host:
        outs = [host.step(obs(i)) for i in range(1, 4)]
    assert [o.outcome for o in outs] == ["error"] * 3
    assert outs[0].error == "ValueError: boom at step 1"
    assert "\n" not in outs[2].error and outs[2].report is None
    log = stderr_text(run_dir)
    assert "Traceback" in log and "second line of the message" in log
    assert host.starts == 1  # a raising step does not cost a restart


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_timeout_kills_the_process_and_the_next_step_works(endpoint, run_dir, isolation):
    with make_host(endpoint, run_dir, "SleepyAgent", step_budget=1.5, setup_budget=20, isolation=isolation) as host:
        assert host.start().ok
        t0 = time.monotonic()
        out = host.step(obs(1))
        assert out.outcome == "timeout" and "budget of 1.5 s" in out.error
        assert time.monotonic() - t0 < 8
        assert not host.running
        out = host.step(obs(2))
        assert out.outcome == "ok", out.error
        assert out.report.notes == "awake at step 2 after 2 setups"
        assert host.starts == 2
    time.sleep(0.2)
    escapees = _processes_with(b"sremarathon-escapee")
    if host.isolation == "namespaces":  # the grandchild that left the group died with the PID namespace
        assert not escapees
    for pid in escapees:  # without namespaces a setsid() child survives: documented; clean up ours
        os.kill(int(pid), 9)


def _processes_with(needle: bytes) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if needle in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                pass
    return found


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_agent_prints_cannot_corrupt_the_protocol(endpoint, run_dir, isolation):
    with make_host(endpoint, run_dir, "ChattyAgent", isolation=isolation) as host:
        outs = [host.step(obs(i)) for i in (1, 2)]
    assert [o.outcome for o in outs] == ["ok", "ok"], [o.error for o in outs]
    assert outs[1].report.notes == "chatty step 2, stdin gave ''"
    log = stderr_text(run_dir)
    for text in ("hello from setup", "junk on stdout", "forged", "through sys.__stdout__", "raw bytes on fd 1"):
        assert text in log


def test_garbage_reports_are_invalid_and_the_process_survives(endpoint, run_dir):
    with make_host(endpoint, run_dir, "GarbageAgent") as host:
        outs = [host.step(obs(i)) for i in range(1, 5)]
        assert host.starts == 1
    assert [o.outcome for o in outs] == ["invalid", "invalid", "invalid", "ok"]
    assert outs[0].error == "step returned a int, expected a Report, a dict or None"
    assert "findings.0.incident" in outs[1].error
    assert outs[3].report.findings == [] and outs[3].report.notes == ""


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_dead_agent_is_restarted_on_the_next_step(endpoint, run_dir, isolation):
    with make_host(endpoint, run_dir, "ExitingAgent", isolation=isolation) as host:
        first = host.step(obs(1))
        second = host.step(obs(2))
    assert first.outcome == "dead"
    assert "exited with code 3" in first.error and "about to vanish" in first.error
    assert second.outcome == "ok" and second.report.notes == "alive at step 2, setups=2"


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_death_is_noticed_even_if_a_forked_child_holds_the_pipe(endpoint, run_dir, isolation):
    with make_host(endpoint, run_dir, "ForkExitAgent", step_budget=8, isolation=isolation) as host:
        t0 = time.monotonic()
        first = host.step(obs(1))
        assert time.monotonic() - t0 < 4
        assert first.outcome == "dead" and "exited with code 4" in first.error
        assert host.step(obs(2)).report.notes == "back"


def test_setup_failures_are_retried_then_the_agent_is_disabled(endpoint, run_dir):
    with make_host(endpoint, run_dir, "SetupFailsAgent", max_setup_failures=3) as host:
        outs = [host.start()] + [host.step(obs(i)) for i in range(1, 4)]
    assert [o.outcome for o in outs] == ["error", "error", "error", "dead"]
    assert outs[0].error == "setup: setup raised RuntimeError: cannot reach my model server"
    assert host.starts == 3
    assert outs[3].error.startswith("agent disabled after 3 failed setups; last: setup: setup raised")


def test_load_error_is_reported_as_a_setup_error(endpoint, run_dir):
    with make_host(endpoint, run_dir, "NoSuchAgent", max_setup_failures=1) as host:
        out = host.start()
        assert out.outcome == "error"
        assert "has no attribute 'NoSuchAgent'" in out.error
        assert host.step(obs(1)).outcome == "dead"


def test_stderr_log_is_capped(endpoint, run_dir):
    with make_host(endpoint, run_dir, "LoudAgent", stderr_cap=100_000) as host:
        assert [host.step(obs(i)).outcome for i in (1, 2)] == ["ok", "ok"]
    log = run_dir.parent / "agent-stderr.log"
    assert log.stat().st_size <= 100_000 + 200
    assert "agent stderr truncated at 100000 bytes" in log.read_text()


CMD_AGENT = textwrap.dedent("""
    import json, sys, urllib.request
    env = None
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "close":
            break
        if msg["op"] == "setup":
            env = msg["env"]
            print(json.dumps({"id": msg["id"]}), flush=True)
            continue
        step = msg["obs"]["step"]
        if step == 2:
            print("this is not json", flush=True)
            continue
        req = urllib.request.Request(env["server"] + "/sremarathon/v1/pipeline/shop/changes",
                                     headers={"Authorization": "Bearer " + env["token"]})
        n = len(json.load(urllib.request.urlopen(req))["items"])
        alerts = [a["id"] for a in msg["obs"]["alerts"]]
        report = {"findings": [{"incident": "i1", "alerts": alerts, "component": "service:shop/cart"}],
                  "notes": f"cmd step {step} saw {n} changes"}
        print(json.dumps(report), flush=True)
""")


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_agent_cmd_speaks_the_same_framing(endpoint, run_dir, tmp_path, isolation):
    script = tmp_path / "cmd_agent.py"
    script.write_text(CMD_AGENT)
    with make_host(endpoint, run_dir, cmd=[sys.executable, str(script)], isolation=isolation) as host:
        assert host.spec.label.startswith("cmd:")
        outs = [host.step(obs(i, [alert("a1")])) for i in (1, 2, 3)]
    assert outs[0].outcome == "ok", outs[0].error
    assert outs[0].report.notes == "cmd step 1 saw 4 changes"
    assert outs[0].report.findings[0].alerts == ["a1"]
    assert outs[1].outcome == "invalid" and "non-JSON line" in outs[1].error
    assert outs[2].outcome == "ok" and outs[2].report.notes == "cmd step 3 saw 4 changes"


def test_agent_spec_from_options(tmp_path):
    spec = AgentSpec.from_options(agent_cmd="./bin/agent --fast 'two words'", cwd=tmp_path)
    assert spec.cmd == (str(tmp_path / "bin/agent"), "--fast", "two words")
    assert AgentSpec.from_options(agent="a.b:C").label == "a.b:C"
    with pytest.raises(ValueError):
        AgentSpec()


def test_rollback_baseline_reverts_the_latest_service_change_and_claims(endpoint, run_dir):
    with _baseline_host(endpoint, run_dir, "RollbackAgent") as host:
        a1, a2 = alert("a1", minutes=10), alert("a2", minutes=12, service="cart")
        noise = alert("n1", minutes=11, app="shop", service="web")
        out = host.step(obs(1, [a1, a2, noise]))
        assert out.outcome == "ok", out.error
        by_key = {f.incident: f for f in out.report.findings}
        cart = by_key["svc:shop/cart"]
        assert cart.alerts == ["a1", "a2"] and cart.component == "service:shop/cart"
        assert cart.cause == "change:c3"  # latest cart change before the alerts, not the future c9
        assert by_key["svc:shop/web"].cause == "change:c2"
        assert not out.report.claims
        # the same incident is not reverted twice; resolution brings a claim
        out = host.step(obs(2, [a1, a2, noise]))
        assert not out.report.claims
        resolved = [alert("a1", "resolved", minutes=10), alert("a2", "resolved", minutes=12)]
        out = host.step(obs(3, [*resolved, noise]))
        assert [c.incident for c in out.report.claims] == ["svc:shop/cart"]
        # a new alert for cart after the claim opens a second incident
        out = host.step(obs(4, [*resolved, noise, alert("a3", minutes=30)]))
        assert "svc:shop/cart#2" in {f.incident for f in out.report.findings}
    assert sorted(endpoint.reverts) == [("shop", "c1"), ("shop", "c2"), ("shop", "c3")]
    journal = json.loads((run_dir / "workspace" / "rollback-agent.json").read_text())
    assert journal["incidents"]["svc:shop/cart"]["revert"] == "r-c3"


def _baseline_host(endpoint, run_dir, name):
    env = EnvironmentWire(workspace=str(run_dir / "workspace"), kubeconfig=str(run_dir / "kubeconfig"),
                          apps=["shop"], cadence_seconds=60, server=endpoint.url, token=TOKEN)
    return AgentHost(AgentSpec(agent=f"pytest_sremarathon.baselines:{name}"), env, step_budget=10,
                     stderr_path=run_dir.parent / "agent-stderr.log", hide=[run_dir])


def test_noop_baseline(endpoint, run_dir):
    with _baseline_host(endpoint, run_dir, "NoopAgent") as host:
        out = host.step(obs(1, [alert("a1")]))
    assert out.outcome == "ok" and out.report.findings == [] and out.report.claims == []


# --- isolation ---------------------------------------------------------------------------------


def _snoop(endpoint, run_dir, tmp_path, monkeypatch, isolation):
    marker = "SREMARATHON-MARKER-" + os.urandom(8).hex()
    truth = run_dir / "truth"
    truth.mkdir()
    secret_file = truth / f"ground_truth-{marker}.json"
    secret_file.write_text(json.dumps({"faults": [marker]}))
    (run_dir / "events.jsonl").write_text(marker + "\n")
    monkeypatch.setenv("SREMARATHON_LEAK_CHECK", marker)  # inherited by anything not scrubbed
    # /proc/<pid>/environ shows a process's environment as exec'd: a sibling started with the
    # marker in its environment and argv stands in for the marathon's own processes.
    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker],
                               env=dict(os.environ), stdin=subprocess.DEVNULL)
    (run_dir / "workspace" / "targets.json").write_text(json.dumps({
        "marker": marker, "files": [str(secret_file), str(run_dir / "events.jsonl")],
        "dirs": [str(run_dir), str(truth)], "roots": [str(tmp_path)], "budget": 4,
        "write_outside": str(tmp_path / "tampered.txt")}))
    try:
        with make_host(endpoint, run_dir, "SnoopAgent", step_budget=25, isolation=isolation) as host:
            out = host.step(obs(1))
    finally:
        sibling.kill()
        sibling.wait()
    assert out.outcome == "ok", out.error
    return host, json.loads(out.report.notes)


def test_snoop_agent_finds_the_marker_without_isolation(endpoint, run_dir, tmp_path, monkeypatch):
    """Control: the probe is able to find the secret when nothing hides it."""
    host, seen = _snoop(endpoint, run_dir, tmp_path, monkeypatch, "none")
    assert host.isolation == "none"
    kinds = {h.split(":")[0] for h in seen["hits"]}
    assert {"content", "listdir"} <= kinds
    assert any(h.endswith("/environ") for h in seen["hits"]), seen["hits"]
    assert any(h.endswith("/cmdline") for h in seen["hits"]), seen["hits"]
    # its own environment was scrubbed: the marker in the host's os.environ did not follow it
    assert f"content:/proc/{seen['self']}/environ" not in seen["hits"]


def test_isolated_agent_cannot_see_run_dir_or_parent(endpoint, run_dir, tmp_path, monkeypatch):
    mode, _, detail = detect_isolation()
    if mode != "namespaces":
        pytest.skip(f"agent isolation unavailable on this machine ({detail})")
    host, seen = _snoop(endpoint, run_dir, tmp_path, monkeypatch, "auto")
    assert host.isolation == "namespaces", host.isolation_detail
    assert seen["hits"] == [], seen
    assert seen["umounted"] == []
    assert set(seen["procs"]) <= {"0", "1"}  # no parent (ppid 0), only itself as pid 1
    assert seen["files_read"] > 0 and seen["names_seen"] > 1000
    # the rest of the filesystem is read-only; the workspace (bound back from inside the
    # hidden run dir) and its TMPDIR are writable and writes reach the host
    writes = seen["writes"]
    assert writes.pop(str(tmp_path / "tampered.txt")) is False
    assert not (tmp_path / "tampered.txt").exists()
    assert all(writes.values()), writes
    assert (run_dir / "workspace" / "note.txt").read_text() == "written by the agent"
