"""The pytest face of a marathon: collection ids, ordering, messages and JUnit output."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


def test_segments_collect_in_order_with_marathon_ids(pytester: pytest.Pytester, write_scenario) -> None:
    scenario = write_scenario("marathon", duration="4h", segment="1h", schedule={"faults": 4})
    result = pytester.runpytest_subprocess(str(scenario), "--agent=pytest_sremarathon.baselines:NoopAgent",
                                           "--collect-only", "-q")
    ids = [line.split("::", 1)[1] for line in result.outlines if "::" in line]
    assert ids == [f"marathon[seed=1]::segment-{i:02d}" for i in range(1, 5)]


def test_without_an_agent_collecting_a_marathon_is_a_usage_error(pytester: pytest.Pytester, write_scenario) -> None:
    scenario = write_scenario("marathon", duration="1h", schedule={"faults": 1})
    result = pytester.runpytest_subprocess(str(scenario))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a marathon needs an agent*", "*--agent=*"])


def test_segment_items_report_fault_progress_and_attach_the_bundle(pytester: pytest.Pytester, write_scenario,
                                                                    tmp_path: Path) -> None:
    scenario = write_scenario("marathon", duration="2h", segment="1h", schedule={"faults": 3})
    xml = tmp_path / "out.xml"
    result = pytester.runpytest_subprocess(str(scenario), "--agent=pytest_sremarathon.baselines:NoopAgent",
                                           f"--junitxml={xml}", "-o", "junit_logging=system-out",
                                           f"--marathon-out={tmp_path / 'runs'}")
    result.stdout.fnmatch_lines(["*correlated ✗ localized ✗ repaired-while-active ✗*", "*SRE marathon results*"])
    cases = list(ET.parse(xml).getroot().iter("testcase"))
    assert [c.get("name") for c in cases] == ["marathon[seed=1]::segment-01", "marathon[seed=1]::segment-02"]
    for case in cases:
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["sremarathon_bundle"].endswith(".tar.gz")
        assert Path(props["sremarathon_bundle"]).exists()
        out = case.find("system-out")
        assert out is not None and f"[[ATTACHMENT|{props['sremarathon_bundle']}]]" in (out.text or "")
