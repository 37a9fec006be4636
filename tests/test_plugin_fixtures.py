"""The fixtures for plain test functions: cluster, fault_schedule, agent, marathon, marathon_result."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

NOOP = "--agent=pytest_sremarathon.baselines:NoopAgent"

TESTS = """
import pytest
from datetime import timedelta

pytestmark = pytest.mark.marathon_scenario("marathon.yaml")


def test_fault_schedule_is_the_ground_truth(fault_schedule, marathon):
    assert [f.id for f in fault_schedule.faults] == ["F01", "F02"]
    assert fault_schedule.seed == marathon.seed == 1
    assert all(f.kind and f.start < f.end for f in fault_schedule.faults)
    assert [w.name for w in marathon.segments] == ["segment-01", "segment-02"]
    in_first = marathon.faults_in(marathon.segments[0])
    assert {f.id for f in in_first} <= {"F01", "F02"}


def test_cluster_agent_and_advancing(marathon, cluster, agent):
    score = marathon.advance("20m")
    assert marathon.now - marathon.start == timedelta(minutes=20)
    assert not score.complete and not marathon.finished
    nodes = cluster.core_v1().list_node().items
    assert {n.metadata.labels["topology.kubernetes.io/zone"] for n in nodes} == {"zone-a", "zone-b"}
    assert cluster.apps_v1().list_namespaced_deployment(cluster.apps[0]).items
    # an operator's credentials, kept out of the agent's reach (the run's private directory)
    assert cluster.kubeconfig.is_relative_to(marathon.run.private_dir)
    assert agent.label == "pytest_sremarathon.baselines:NoopAgent"
    assert agent.outcomes() == {"ok": 4}
    assert agent.isolation in ("namespaces", "none")
    marathon.advance(timedelta(minutes=10))  # a time from the run's start: never goes back
    assert marathon.now - marathon.start == timedelta(minutes=20)
    marathon.advance(marathon.start + timedelta(hours=5))  # stops at the run's end
    assert marathon.now == marathon.end and not marathon.finished


def test_marathon_result_is_the_scored_run(marathon_result, marathon):
    assert marathon.finished and marathon.result is marathon_result
    assert marathon_result.bundle.is_file() and marathon.bundle == marathon_result.bundle
    assert [f.id for f in marathon_result.score.faults] == ["F01", "F02"]
    assert marathon_result.virtual_seconds == 3600
    assert marathon.score() is marathon_result.score


def test_the_cluster_is_gone_after_the_run(marathon, cluster):
    pass


@pytest.mark.marathon_scenario("marathon.yaml", seeds=[4])
def test_marker_seeds(marathon, fault_schedule):
    assert marathon.name == "marathon[seed=4]" and fault_schedule.seed == 4
"""


def test_fixtures_share_the_run_of_the_marathon_file(pytester: pytest.Pytester, write_scenario) -> None:
    src = write_scenario("marathon", apps=["shop"], duration="1h", segment="30m", schedule={"faults": 2})
    (pytester.path / "marathon.yaml").write_text(src.read_text())
    pytester.makepyfile(test_fixtures=TESTS)
    result = pytester.runpytest_subprocess("test_fixtures.py", "marathon.yaml", NOOP, "-v")
    result.stdout.fnmatch_lines([
        "test_fixtures.py::test_fault_schedule_is_the_ground_truth[[]seed=1[]] PASSED*",
        "test_fixtures.py::test_cluster_agent_and_advancing[[]seed=1[]] PASSED*",
        "test_fixtures.py::test_marathon_result_is_the_scored_run[[]seed=1[]] PASSED*",
        "test_fixtures.py::test_the_cluster_is_gone_after_the_run[[]seed=1[]] ERROR*",
        "test_fixtures.py::test_marker_seeds[[]seed=4[]] PASSED*",
    ])
    result.stdout.fnmatch_lines(["*marathon marathon[[]seed=1[]] is finished: its cluster is gone*"])
    # the segment items ran on the same (already finished) run: one bundle per marathon
    assert len(list((pytester.path / "sremarathon-runs").glob("*.tar.gz"))) == 2
    result.stdout.fnmatch_lines(["marathon.yaml::marathon[[]seed=1[]] * 0.0 * 2 * 0 * 0 * 0 *",
                                 "marathon.yaml::marathon[[]seed=4[]] * 0.0 (interrupted) * - *"], consecutive=False)


def test_fixture_tests_without_an_agent_are_a_usage_error(pytester: pytest.Pytester, write_scenario) -> None:
    src = write_scenario("marathon", apps=["shop"], duration="1h", schedule={"faults": 1})
    (pytester.path / "marathon.yaml").write_text(src.read_text())
    pytester.makepyfile(test_fixtures=TESTS)
    result = pytester.runpytest("test_fixtures.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_fixtures.py::test_*: a marathon needs an agent to run*"])


def test_a_local_fixture_of_the_same_name_wins(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest

        @pytest.fixture
        def cluster():
            return "my own cluster"
    """)
    pytester.makepyfile("def test_mine(cluster):\n    assert cluster == 'my own cluster'\n")
    result = pytester.runpytest()  # no agent needed: no marathon fixture is used
    result.assert_outcomes(passed=1)
