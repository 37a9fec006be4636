"""Fixtures for plain test functions that make their own assertions about a marathon.

    import pytest

    pytestmark = pytest.mark.marathon_scenario("smoke")  # a built-in name, or a path from the rootdir

    def test_no_false_claims(marathon_result):
        assert marathon_result.score.false_claims == 0

    def test_cart_is_served_from_both_zones(marathon, cluster):
        marathon.advance("2h")
        pods = cluster.core_v1().list_namespaced_pod("shop", label_selector="app=cart").items
        assert {p.spec.node_name for p in pods}

A test that uses any of them runs once per marathon seed (``test_x[seed=1]`` …), on the same
run as the marathon file's segment items when both name the same file and seed (and, with
xdist, on the same worker). The marathon is chosen by the ``marathon_scenario(NAME|PATH,
seeds=None)`` marker (a built-in scenario's name, or a path relative to the rootdir), else
``--marathon-scenario`` / ``marathon_scenario``, else ``<rootdir>/scenarios/marathon.yaml`` when
the project has one, else the built-in ``default``.

* ``marathon`` — :class:`MarathonHandle`: ``advance(to)``, ``score()``, ``finish()``,
  ``result``, ``bundle``, ``segments``, ``faults_in(segment)``, ``run`` (the live
  :class:`~pytest_sremarathon.marathon.Marathon`).
* ``marathon_result`` — the finished, scored run (:class:`~pytest_sremarathon.marathon.RunResult`:
  ``score``, ``bundle``, ``schedule`` …). Requesting it runs the marathon to its end.
* ``cluster`` — :class:`ClusterHandle`: an operator kubeconfig and API clients for the run's
  cluster (not the agent's credentials; the operator is not subject to the agent policy).
* ``fault_schedule`` — the run's ground truth (:class:`~pytest_sremarathon.schedule.Schedule`).
  For test code only: the agent never sees it.
* ``agent`` — :class:`AgentHandle`: the agent under test as loaded for this run.
"""

from __future__ import annotations

import secrets
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

import pytest

from . import builtin
from .errors import SremarathonError
from .session import MarathonCrashed, MarathonSession, MarathonTarget, session_of

if TYPE_CHECKING:
    from .agent_host import AgentSpec
    from .marathon import Marathon, RunResult, SegmentWindow
    from .schedule import Schedule
    from .scoring import MarathonScore

__all__ = ["AgentHandle", "ClusterHandle", "MarathonHandle", "agent", "cluster", "fault_schedule", "marathon",
           "marathon_result", "sremarathon_target"]


# -- which marathon (collection time) -------------------------------------------------------
def targets_for(metafunc: pytest.Metafunc) -> list[Any]:
    """``pytest.param`` per marathon seed for a test function that uses the fixtures."""
    config = metafunc.config
    ms = session_of(config)
    where = metafunc.definition.nodeid
    marker = metafunc.definition.get_closest_marker("marathon_scenario")
    raw = None
    seeds = None
    if marker is not None:
        raw = marker.args[0] if marker.args else marker.kwargs.get("path")
        seeds = marker.kwargs.get("seeds")
    if not ms.require_agent(where):
        return []  # the usage error is raised once collection is over
    if raw is not None and builtin.is_name(str(raw)):
        try:
            path = builtin.builtin_path(str(raw))
        except builtin.UnknownScenario as exc:
            pytest.fail(f"{where}: marathon_scenario({raw!r}): {exc}, or give a path relative to the rootdir",
                        pytrace=False)
    elif raw is not None:
        path = Path(raw) if Path(raw).is_absolute() else config.rootpath / raw
    else:
        path = ms.settings.session_scenario(config.rootpath)
    if not path.is_file():
        pytest.fail(f"{where}: no marathon scenario at {path}; mark the test with "
                    f"@pytest.mark.marathon_scenario(\"path/to/marathon.yaml\") (relative to the rootdir) or a "
                    f"built-in scenario's name ({builtin.names_line()}), or pass --marathon-scenario", pytrace=False)
    try:
        scenario = ms.scenario(path)
    except SremarathonError as exc:
        pytest.fail(f"{where}: {exc}", pytrace=False)
    if seeds is not None:
        seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    for_seeds = seeds or ms.settings.seeds or [scenario.spec.seed]
    params = []
    for seed in for_seeds:
        target = ms.target(path, scenario, int(seed))
        params.append(pytest.param(target, id=f"seed={target.seed}", marks=pytest.mark.xdist_group(name=target.group)))
    return params


def fixture_report_data(item: pytest.Item) -> Optional[dict[str, Any]]:
    """For a test that used the fixtures: the marathon's final result once it has one (it
    rides on the report, for the summary and the gate on the xdist controller)."""
    callspec = getattr(item, "callspec", None)
    target = callspec.params.get("sremarathon_target") if callspec is not None else None
    if target is None:
        return None
    ms = session_of(item.config)
    if target.id not in ms.results or target.id in ms.reported:
        return None
    return ms.final_data(target)


# -- handles --------------------------------------------------------------------------------
class MarathonHandle:
    """The run behind a test: advance it, look at its results, find its bundle."""

    def __init__(self, session: "MarathonSession", target: "MarathonTarget") -> None:
        self._session = session
        self.target = target

    def __repr__(self) -> str:
        return f"<MarathonHandle {self.id} at {self.now:%H:%M} virtual>"

    @property
    def id(self) -> str:
        return self.target.id

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def seed(self) -> int:
        return self.target.seed

    @property
    def run(self) -> "Marathon":
        """The live marathon (started on first use)."""
        try:
            return self._session.marathon(self.target)
        except MarathonCrashed as exc:
            pytest.fail(str(exc), pytrace=False)

    @property
    def segments(self) -> "list[SegmentWindow]":
        from .marathon import segment_windows

        return segment_windows(self.target.scenario)

    @property
    def now(self) -> datetime:
        """Virtual time the run has reached."""
        m = self._session.running.get(self.id)
        from .clock import EPOCH

        return m.clock.now if m is not None else EPOCH

    @property
    def start(self) -> datetime:
        return self.run.start_time

    @property
    def end(self) -> datetime:
        return self.run.end_time

    def advance(self, to: Union[datetime, timedelta, str, float]) -> "MarathonScore":
        """Run the marathon up to ``to`` (a virtual datetime, a timedelta or duration string
        such as ``"2h"`` from the run's start, or seconds) and return the score so far. Never
        goes back; stops at the run's end."""
        from .scenario import parse_duration

        m = self.run
        if isinstance(to, datetime):
            t = to
        elif isinstance(to, timedelta):
            t = m.start_time + to
        else:
            t = m.start_time + timedelta(seconds=parse_duration(to))
        try:
            m.advance_to(t)
        except Exception as exc:
            self._session.crash(self.target, f"advance({to!r})", exc)
            raise
        return self.score()

    def score(self) -> "MarathonScore":
        """The final score once finished, else the live score so far."""
        result = self._session.results.get(self.id)
        return result.score if result is not None else self.run.score_now()

    def faults_in(self, segment: "SegmentWindow") -> list[Any]:
        return self.run.faults_in(segment)

    def finish(self) -> "RunResult":
        """Run to the end, seal the bundle and score it from the bundle alone (idempotent)."""
        try:
            return self._session.finish(self.target)
        except MarathonCrashed as exc:
            pytest.fail(str(exc), pytrace=False)

    @property
    def result(self) -> "Optional[RunResult]":
        """The finished run, or None while it is still going."""
        return self._session.results.get(self.id)

    @property
    def finished(self) -> bool:
        return self.id in self._session.results

    @property
    def bundle(self) -> Path:
        """Where the sealed bundle is (the file exists once the run is finished)."""
        result = self.result
        return Path(result.bundle) if result is not None else Path(str(self.run.run_dir) + ".tar.gz")


@dataclass
class ClusterHandle:
    """The run's cluster, as an operator sees it."""

    kubeconfig: Path
    server: str
    apps: list[str]
    backend: Any  # the run's backend (for the twin: .store, .cluster, .pipelines)

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the cluster."""
        from kubernetes import config as kube_config

        return kube_config.new_client_from_config(config_file=str(self.kubeconfig))

    def core_v1(self) -> Any:
        from kubernetes import client

        return client.CoreV1Api(self.api_client())

    def apps_v1(self) -> Any:
        from kubernetes import client

        return client.AppsV1Api(self.api_client())


@dataclass
class AgentHandle:
    """The agent under test as loaded for this run (it runs in its own process)."""

    spec: "AgentSpec"
    label: str
    isolation: str  # "namespaces" or "none"
    isolation_detail: str
    step_budget: float  # wall seconds a step may take
    stderr_log: Path  # the agent's stderr (also in the sealed bundle as agent/stderr.log)
    _marathon: "Marathon"

    def stderr(self) -> str:
        try:
            return self.stderr_log.read_text(errors="replace")
        except OSError:
            return ""

    def outcomes(self) -> Counter[str]:
        """Step outcomes so far (``ok``, ``error``, ``timeout``, ``invalid``, ``dead``)."""
        return Counter(str(e.data.get("outcome")) for e in self._marathon.writer.events if e.type == "agent.step")


# -- fixtures -------------------------------------------------------------------------------
@pytest.fixture
def sremarathon_target(request: pytest.FixtureRequest) -> "MarathonTarget":
    """Which marathon (scenario file and seed) this test is about; parametrized per seed at
    collection. Internal: use the ``marathon`` fixture."""
    param = getattr(request, "param", None)
    if param is None:
        pytest.fail("the marathon fixtures must be named as test arguments (they are parametrized per seed at "
                    "collection); request.getfixturevalue() cannot add them later", pytrace=False)
    return param


@pytest.fixture
def marathon(request: pytest.FixtureRequest, sremarathon_target: "MarathonTarget") -> MarathonHandle:
    """The marathon run of this test (shared with the marathon file's segment items)."""
    return MarathonHandle(session_of(request.config), sremarathon_target)


@pytest.fixture
def marathon_result(marathon: MarathonHandle) -> "RunResult":
    """The finished, scored run (runs the marathon to its end first)."""
    return marathon.finish()


@pytest.fixture
def fault_schedule(marathon: MarathonHandle) -> "Schedule":
    """The run's ground truth: every scheduled fault with its window, kind, target and (once
    injected) component and change. For test code only — never handed to the agent."""
    return marathon.run.schedule


@pytest.fixture
def cluster(marathon: MarathonHandle) -> ClusterHandle:
    """The run's cluster: an operator kubeconfig (kept where the agent cannot read it) and
    Kubernetes API clients. Fails once the run is finished (its cluster is gone)."""
    m = marathon.run
    if marathon.finished or m.server is None:
        pytest.fail(f"marathon {marathon.name} is finished: its cluster is gone", pytrace=False)
    path = m.private_dir / "operator" / "kubeconfig"
    if not path.exists():
        token = secrets.token_urlsafe(24)
        m.server.tokens[token] = "operator"
        m.server.write_kubeconfig(path, token, context="sremarathon-operator")
    return ClusterHandle(kubeconfig=path, server=m.server.https_url, apps=sorted(m.apps), backend=m.backend)


@pytest.fixture
def agent(marathon: MarathonHandle) -> AgentHandle:
    """The agent under test as loaded for this run."""
    m = marathon.run
    host = m.host
    assert host is not None
    return AgentHandle(spec=m.options.agent, label=m.options.agent.label, isolation=host.isolation,
                       isolation_detail=getattr(host, "isolation_detail", ""), step_budget=host.step_budget,
                       stderr_log=m.run_dir / "agent" / "stderr.log", _marathon=m)
