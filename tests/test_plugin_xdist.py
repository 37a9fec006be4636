"""``pytest -n 2 --marathon-seeds 1,2``: one marathon per worker, segments in order, and the
same results, properties and summary as without xdist."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

pytest.importorskip("xdist")

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"


def junit(path: Path) -> tuple[dict[str, tuple], dict[str, str]]:
    """{testcase name: (classname, outcome, properties)} and the suite properties."""
    root = ET.parse(path).getroot()
    cases = {}
    for case in root.iter("testcase"):
        outcome = next((tag for tag in ("failure", "error", "skipped") if case.find(tag) is not None), "passed")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outs = case.findall("system-out")
        attachment = re.search(r"\[\[ATTACHMENT\|(.+?)\]\]", outs[0].text or "").group(1) if outs else None
        assert attachment is None or attachment == props.get("sremarathon_bundle")
        cases[case.get("name")] = (case.get("classname"), outcome, props, len(outs))
    suite = {p.get("name"): p.get("value") for p in root.find("testsuite").find("properties").iter("property")}
    return cases, suite


def without_bundles(cases: dict[str, tuple]) -> dict[str, tuple]:
    return {name: (cls, outcome, {k: v for k, v in props.items() if k != "sremarathon_bundle"}, n)
            for name, (cls, outcome, props, n) in cases.items()}


def summary(result: pytest.RunResult) -> list[str]:
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if "SRE marathon results" in line)
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("="):
            break
        rows.append(re.sub(r"\S+\.tar\.gz", "<bundle>", line))
    return rows


def test_two_seeds_on_two_workers_match_a_plain_run(pytester: pytest.Pytester, write_scenario) -> None:
    src = write_scenario("marathon", apps=["shop"], duration="1h", segment="30m", schedule={"faults": 2})
    (pytester.path / "marathon.yaml").write_text(src.read_text())
    pytester.makepyfile(test_final="""
        import pytest

        pytestmark = pytest.mark.marathon_scenario("marathon.yaml")

        def test_scored(marathon_result, marathon):
            assert marathon_result.score.score >= 0
            assert marathon.bundle.exists()

        @pytest.mark.marathon_scenario("marathon.yaml", seeds=[7])
        def test_glance(fault_schedule):  # starts a run no test finishes: sealed when the session ends
            assert fault_schedule.seed == 7
    """)
    common = ["marathon.yaml", "test_final.py", NOOP, "--marathon-seeds=1,2"]
    plain = pytester.runpytest_subprocess(*common, "--junitxml=plain.xml", "--marathon-out=plain-runs")
    dist = pytester.runpytest_subprocess(*common, "-n", "2", "-v", "--junitxml=dist.xml", "--marathon-out=dist-runs")
    assert plain.ret == dist.ret == pytest.ExitCode.TESTS_FAILED

    # without --dist, each marathon stays on one worker: one bundle per seed, fixture test included
    dist.stdout.fnmatch_lines(["*sremarathon: --dist loadgroup (each marathon on one worker, in segment order)*",
                               "*scheduling tests via LoadGroupScheduling*"])
    assert len(list((pytester.path / "dist-runs").glob("*.tar.gz"))) == 3
    assert len(list((pytester.path / "plain-runs").glob("*.tar.gz"))) == 3
    workers: dict[str, set[str]] = {}
    order: dict[str, list[str]] = {}
    for line in dist.outlines:
        m = re.match(r"\[(gw\d)\] \[ *\d+%\] \w+ (\S+)", line)
        if m:
            seed = re.search(r"seed=(\d)", m.group(2)).group(1)
            workers.setdefault(seed, set()).add(m.group(1))
            if "segment-" in m.group(2):
                order.setdefault(seed, []).append(re.search(r"segment-\d+", m.group(2)).group(0))
    assert {seed: len(w) for seed, w in workers.items()} == {"1": 1, "2": 1, "7": 1}
    assert order == {"1": ["segment-01", "segment-02"], "2": ["segment-01", "segment-02"]}

    # same testcases, outcomes and properties (bundle paths differ: one run per session)
    plain_cases, plain_suite = junit(pytester.path / "plain.xml")
    dist_cases, dist_suite = junit(pytester.path / "dist.xml")
    assert without_bundles(dist_cases) == without_bundles(plain_cases)
    assert sorted(n for n in plain_cases if "segment" in n) == [
        f"marathon[seed={s}]::segment-0{i}" for s in (1, 2) for i in (1, 2)]
    assert {k: v for k, v in dist_suite.items() if "bundle" not in k} == \
        {k: v for k, v in plain_suite.items() if "bundle" not in k}
    assert {k for k in dist_suite} == {k for k in plain_suite} and len(dist_suite) == 18  # 3 marathons
    for cases in (plain_cases, dist_cases):
        for seed in (1, 2):
            assert len({props["sremarathon_bundle"] for name, (_, _, props, _) in cases.items()
                        if f"seed={seed}]::" in name}) == 1

    # same summary, the run sealed on a worker at its session's end included (xdist's workeroutput)
    assert summary(dist) == summary(plain)
    assert len(summary(plain)) == 6  # header, three marathons, weights, think time
    assert "(interrupted)" in summary(plain)[3] and "marathon[seed=7]" in summary(plain)[3]
