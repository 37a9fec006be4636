"""JUnit XML as Jenkins' junit-attachments and GitLab's parser read it, and pytest-html extras."""

from __future__ import annotations

import html
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"
GITLAB_ATTACHMENT = re.compile(r"\[\[ATTACHMENT\|(?P<path>.+?)\]\]")  # lib/gitlab/ci/parsers/test/junit.rb
JENKINS_ATTACHMENT = re.compile(r"^\[\[ATTACHMENT\|(?P<path>[^|\]]+)\]\]$", re.M)  # one per line


@pytest.fixture
def scenario(marathon_file) -> Path:
    # one fault, injected in the first half hour: segment-01 fails, segment-02 passes
    return marathon_file(duration="1h", segment="30m", schedule={"faults": 1})


@pytest.mark.parametrize("ini", [
    "",  # junit_logging = no (pytest's default): the plugin writes the system-out itself
    "junit_logging = all\njunit_log_passing_tests = false",  # pytest writes one for failed tests only
])
def test_each_segment_testcase_carries_properties_and_one_attachment(pytester: pytest.Pytester, scenario: Path,
                                                                     ini: str) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--junitxml=out.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    root = ET.parse(pytester.path / "out.xml").getroot()
    cases = list(root.iter("testcase"))
    assert [(c.get("classname"), c.get("name")) for c in cases] == [
        ("marathon.yaml", "marathon[seed=1]::segment-01"), ("marathon.yaml", "marathon[seed=1]::segment-02")]
    bundles = set()
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert set(props) == {"sremarathon_score", "sremarathon_faults", "sremarathon_stages", "sremarathon_localization",
                              "sremarathon_bundle"}
        float(props["sremarathon_score"])
        bundle = props["sremarathon_bundle"]
        assert bundle.startswith("sremarathon-runs/") and bundle.endswith(".tar.gz")  # relative to the rootdir
        assert (pytester.path / bundle).is_file()
        bundles.add(bundle)
        # GitLab: Hash.from_xml turns two system-out elements into an array and the parse fails
        outs = case.findall("system-out")
        assert len(outs) == 1
        assert GITLAB_ATTACHMENT.search(outs[0].text or "").group("path") == bundle
        assert JENKINS_ATTACHMENT.findall(outs[0].text or "") == [bundle]
    assert len(bundles) == 1
    failed, passed = cases
    assert failed.find("failure") is not None and passed.find("failure") is None  # GitLab attaches on failures
    assert props["sremarathon_faults"] == "0" and props["sremarathon_stages"] == ""
    fprops = {p.get("name"): p.get("value") for p in failed.iter("property")}
    assert fprops["sremarathon_faults"] == "1"
    assert re.fullmatch(r"F01:correlated ✗ localized ✗ repaired-while-active ✗ false-claim –",
                        fprops["sremarathon_stages"])
    # suite level: the marathon's final score, gap and bundle
    suite = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties").iter("property")}
    key = "marathon.yaml::marathon[seed=1]"
    assert suite == {f"sremarathon_score:{key}": "0.00", f"sremarathon_declared_done_gap:{key}": "0.00",
                     f"sremarathon_localization_credit:{key}": "0.000", f"sremarathon_scoring_version:{key}": "2",
                     f"sremarathon_collateral:{key}": "benign_reverts=0 cordons_without_node_fault=0 "
                                                       "healthy_restarts=0 healthy_scales=0",
                     f"sremarathon_bundle:{key}": bundle}
    assert fprops["sremarathon_localization"] == "F01:0 (0 candidates)"


def test_junit_prefix_and_captured_output_keep_a_single_system_out(pytester: pytest.Pytester, scenario: Path) -> None:
    pytester.makeini("[pytest]\njunit_logging = system-out\n")
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--junitxml=out.xml", "--junit-prefix=ci")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase"):
        assert case.get("classname") == "ci.marathon.yaml"
        [out] = case.findall("system-out")
        assert len(GITLAB_ATTACHMENT.findall(out.text or "")) == 1


def test_pytest_html_gets_the_bundle_link_and_the_timeline(pytester: pytest.Pytester, scenario: Path) -> None:
    pytest.importorskip("pytest_html")
    result = pytester.runpytest_subprocess(str(scenario), NOOP, "--html=report/report.html",
                                           "--self-contained-html")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    page = (pytester.path / "report" / "report.html").read_text()
    blob = re.search(r'data-jsonblob="([^"]*)"', page)
    assert blob, "pytest-html keeps its results in a JSON blob"
    tests = json.loads(html.unescape(blob.group(1)))["tests"]
    extras: dict[str, list[dict]] = {}
    for nodeid, runs in tests.items():
        for run in runs:
            extras.setdefault(nodeid.rsplit("::", 1)[-1], []).extend(run.get("extras", []))
    links = {e["content"] for seg in extras.values() for e in seg if e["name"] == "bundle"}
    [link] = links
    assert link.startswith("../sremarathon-runs/marathon-seed1-") and link.endswith(".tar.gz")
    assert (pytester.path / "report" / link).resolve().is_file()
    # on the marathon's last segment: the run's HTML report (sremarathon report) and its timeline
    named = {seg: {e["name"]: e for e in ex} for seg, ex in extras.items()}
    assert set(named["segment-01"]) == {"bundle"}
    assert set(named["segment-02"]) == {"bundle", "report", "timeline"}
    page = (pytester.path / "report" / named["segment-02"]["report"]["content"]).resolve()
    assert page.is_file() and page.name == Path(link).name.replace(".tar.gz", ".html")
    assert 'id="timeline"' in page.read_text()
    assert named["segment-02"]["timeline"]["mime_type"] == "image/svg+xml"
