"""``sremarathon report``: one self-contained HTML page per run, from the bundle alone."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.cli import run_cli, run_json

from pytest_sremarathon.baselines import RollbackAgent
from pytest_sremarathon.builtin import APPS_DIR, SCENARIOS_DIR
from pytest_sremarathon.bundle import open_bundle
from pytest_sremarathon.report import collect, render
from pytest_sremarathon.scoring import score_bundle


class ReportedAgent(RollbackAgent):
    """RollbackAgent, plus one forbidden call at its first step, so the page has a denial."""

    def step(self, obs):
        if obs.step == 1:
            from kubernetes import client, config
            from kubernetes.client.exceptions import ApiException

            config.load_kube_config(str(obs.kubeconfig))
            try:
                client.CoreV1Api().delete_namespace("shop")
            except ApiException:
                pass
        return super().step(obs)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import yaml

    tmp = tmp_path_factory.mktemp("report")
    data = yaml.safe_load((SCENARIOS_DIR / "default.yaml").read_text())
    data.update(apps_dir=str(APPS_DIR), duration="2h", segment="1h")
    data["schedule"]["faults"] = 5
    scenario = tmp / "short.yaml"
    scenario.write_text(yaml.safe_dump(data, sort_keys=False))
    result = run_json("--agent", "test_report:ReportedAgent", "--scenario", str(scenario), "--out", str(tmp / "runs"))
    return Path(result["bundle"])


class _Page(HTMLParser):
    """Collects elements by id, every tag with its attributes, and the text."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, dict[str, str]] = {}
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.js_errors: list[str] = []
        self._in_errors = 0

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if "id" in a:
            self.ids[a["id"]] = {"tag": tag, **a}
        if self._in_errors or a.get("id") == "js-errors":
            self._in_errors += 1

    def handle_endtag(self, tag):
        if self._in_errors:
            self._in_errors -= 1

    def handle_data(self, data):
        self.text.append(data)
        if self._in_errors:
            self.js_errors.append(data)


def parse(html_text: str) -> _Page:
    page = _Page()
    page.feed(html_text)
    return page


def test_report_command_writes_a_self_contained_page(bundle: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    proc = run_cli("report", str(bundle), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(out)
    text = out.read_text()
    page = parse(text)
    # nothing to fetch: no external scripts, styles, images or fonts
    for tag, attrs in page.tags:
        for attr in ("src", "href"):
            assert not attrs.get(attr, "").startswith(("http:", "https:", "//")), (tag, attrs)
        assert not (tag == "link" and attrs.get("rel") == "stylesheet")
        assert not (tag == "script" and "src" in attrs)
    assert "@import" not in text and "url(" not in text

    score = score_bundle(open_bundle(bundle))
    for element in ("score", "timeline", "timeline-legend", "alert-volume", "agent-actions", "fault-table",
                    "weights", "integrity", "stage-bar", "lane-shop"):
        assert element in page.ids, element
    assert page.ids["integrity"]["data-ok"] == "yes"
    assert page.ids["metric-score"]["data-value"] == f"{score.score:.1f}"
    assert page.ids["metric-gap"]["data-value"] == f"{score.declared_done_gap:+.1f}"
    assert page.ids["metric-denials"]["data-value"] == str(score.policy_denials) == "1"
    rows = [a for t, a in page.tags if t == "tr" and a.get("class") == "fault"]
    assert [r["data-fault"] for r in rows] == [f.id for f in score.faults]
    assert [float(r["data-points"]) for r in rows] == [f.points for f in score.faults]
    bars = [a for t, a in page.tags if t == "rect" and a.get("class") == "fault"]
    assert sorted(b["data-fault"] for b in bars) == sorted(f.id for f in score.faults)
    marks = [a for t, a in page.tags if t == "g" and a.get("class") == "stage-mark"]
    assert len(marks) == sum(f.correlated + f.localized + f.repaired for f in score.faults)
    actions = [a for _, a in page.tags if a.get("class") == "action"]
    assert [a["data-allowed"] for a in actions].count("no") == 1
    assert len(actions) == score.agent_actions + score.policy_denials
    claims = [a for t, a in page.tags if t == "circle" and a.get("class") == "claim"]
    assert len(claims) == score.claims
    assert "weights: correlation 20, localization 30, repair 50" in "".join(page.text)
    # precision and causality are on the page: credit and candidates per fault, the rules'
    # version, the collateral item by item, and for each repair the agent actions it is owed to
    cells = [a for t, a in page.tags if t == "td" and "data-credit" in a]
    assert [(float(c["data-credit"]), int(c["data-candidates"])) for c in cells] == \
        [(pytest.approx(f.localization_credit), f.candidates) for f in score.faults]
    assert page.ids["scoring-rules"]["data-version"] == str(score.scoring_version) == "2"
    for key, items in score.collateral.items():
        assert page.ids[f"collateral-{key.replace('_', '-')}"]["data-count"] == str(len(items))
    text = "".join(page.text)
    for f in score.faults:
        for action in f.repair_actions:
            assert action in text, (f.id, action)
    assert any(f.repair_actions for f in score.faults), "RollbackAgent repairs something in two hours"
    # how time was charged: the think-time model, every step as a span of the virtual time it
    # took, every build that ran as spans (building, rolling out)
    events = open_bundle(bundle).events
    assert page.ids["metric-think-time"]["data-value"] == "per-request:10"
    steps = [e.data for e in events if e.type == "agent.step" and e.data["step"]]
    spans = [a for t, a in page.tags if t == "rect" and a.get("class") == "step-span"]
    assert [int(a["data-step"]) for a in spans] == [d["step"] for d in steps]
    assert [float(a["data-seconds"]) for a in spans] == [d["virtual_seconds"] for d in steps]
    assert any(d["virtual_seconds"] > 0 for d in steps)
    ran = {e.data["id"] for e in events if e.type == "pipeline.build" and e.data["state"] == "building"}
    drawn = [a for t, a in page.tags if t == "rect" and a.get("class") == "build-span"]
    assert ran and ran == {a["data-build"] for a in drawn}
    assert {a["data-phase"] for a in drawn} == {"building", "deploying"}
    assert any(a["data-actor"] == "agent" for a in drawn)


def test_page_follows_the_bundle_not_the_tool(bundle: Path, tmp_path: Path) -> None:
    """A run directory with a tampered record renders, flagged as not verifying; a crashed run
    (an unsealed prefix) renders as partial."""
    with tarfile.open(bundle) as tar:
        events = tar.extractfile("events.jsonl").read().decode()  # type: ignore[union-attr]
    lines = events.splitlines(keepends=True)
    crashed = tmp_path / "crashed"
    crashed.mkdir()
    (crashed / "events.jsonl").write_text("".join(lines[: len(lines) // 2]))
    data = collect(crashed)
    assert not data.sealed and data.verified and not data.score.complete
    page = parse(render(data))
    assert "Partial: scored up to" in "".join(page.text)

    tampered = tmp_path / "tampered"
    tampered.mkdir()
    record = json.loads(lines[3])
    record["t"] = record["t"].replace("T00", "T01")
    (tampered / "events.jsonl").write_text("".join(lines[:3] + [json.dumps(record) + "\n"] + lines[4:]))
    page = parse(render(collect(tampered)))
    assert page.ids["integrity"]["data-ok"] == "no"
    assert "prev hash mismatch" in "".join(page.text) or "canonical" in "".join(page.text)

    proc = run_cli("report", str(tmp_path / "missing.tar.gz"), "-o", str(tmp_path / "x.html"))
    assert proc.returncode == 2 and "no such bundle" in proc.stderr and "Traceback" not in proc.stderr


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_report_renders_in_headless_chromium_without_errors(bundle: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium); the page is checked "
                    "without a browser by the other tests")
    out = tmp_path / "report.html"
    assert run_cli("report", str(bundle), "-o", str(out)).returncode == 0
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr", "--v=0"]

    def chromium(*args: str, profile: str) -> subprocess.CompletedProcess:
        return subprocess.run([browser, *flags, f"--user-data-dir={tmp_path / profile}", *args, out.as_uri()],
                              capture_output=True, text=True, timeout=180)

    dom = chromium("--dump-dom", profile="dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    console = [ln for ln in dom.stderr.splitlines() if ":CONSOLE" in ln or "Uncaught" in ln]
    assert console == [], console
    page = parse(dom.stdout)
    body = next(a for t, a in page.tags if t == "body")
    assert body.get("data-ready") == "yes", "the page's script did not run to the end"
    assert "data-js-errors" not in body
    assert "js-errors" in page.ids and "".join(page.js_errors).strip() == ""
    score = score_bundle(open_bundle(bundle))
    assert page.ids["fault-count"] is not None
    rows = [a for t, a in page.tags if t == "tr" and a.get("class") == "fault"]
    assert len(rows) == len(score.faults)

    shot = tmp_path / "report.png"
    proc = chromium("--window-size=1400,1800", f"--screenshot={shot}", profile="shot")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
