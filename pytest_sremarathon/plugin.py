"""The pytest plugin (the ``pytest11`` entry point): the options and the hook implementations,
each hook implemented once. What the hooks do lives in modules named for it:

=====================  ======================================================================
``settings.py``        the options read and checked once (:class:`Settings`)
``session.py``         the session object: the marathons of this process (``config.stash``)
``items.py``           the collection tree: marathon files, runs, segment items
``fixtures.py``        the marathon fixtures for plain test functions
``scoreboard.py``      the results, from reports alone (so ``pytest -n`` = a plain run)
``baseline_file.py``   the baseline file (``--marathon-baseline``)
``junit.py``           testcase names, attachments and properties for ``--junitxml``
``html_extras.py``     pytest-html's links and pictures
``distributed.py``     pytest-xdist: worker detection, ``--dist loadgroup``, hand-overs
=====================  ======================================================================

    pytest --agent=mypkg.agent:Agent --junitxml=out.xml                 # the built-in marathon
    pytest --agent=mypkg.agent:Agent --marathon-scenario smoke           # the 2-hour one
    pytest ci/marathon.yaml --agent=mypkg.agent:Agent                   # a marathon file of yours

Importing this module imports nothing else of the package: pytest loads it on every run on
any machine where the package is installed, so each hook imports what it needs when it runs
(the way pytest-xdist's and Hypothesis's entry points stay light). Without an agent, nothing
of the plugin runs in a project without marathon files, and nothing heavy is imported (the
marathon machinery is imported when a marathon is collected).

Where things happen (so that ``pytest -n`` behaves like a plain run):

* a segment item runs where its marathon runs (one process, or one xdist worker per marathon:
  ``xdist_group`` markers plus ``--dist loadgroup``);
* what an item found rides on its report (``report.sremarathon``, like Hypothesis's
  statistics), so the controller builds the summary, the gate, the baseline update and the JUnit
  extras from reports alone (the scoreboard), never from a worker's marathons.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pytest

if TYPE_CHECKING:
    from .junit import Testcases
    from .session import MarathonSession

pytest_plugins = ("pytest_sremarathon.fixtures",)


# -- options --------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    from . import builtin
    from .settings import DEFAULT_OUT, DEFAULT_PROGRESS_SECONDS

    group = parser.getgroup("sremarathon", "SRE marathons (pytest-sremarathon)")

    def add(name: str, help: str, ini_type: Optional[str] = None, **kw: Any) -> None:
        ini = name.lstrip("-").replace("-", "_")
        group.addoption(name, dest=ini, help=help, **kw)
        if ini_type == "bool":
            parser.addini(ini, help=help, type="bool", default=False)
        else:
            parser.addini(ini, help=help, default=None)

    add("--agent", "the agent under test, as pkg.module:Class", metavar="PKG.MOD:CLASS")
    add("--agent-cmd", "an agent command speaking the JSON-lines protocol (instead of --agent)", metavar="COMMAND")
    add("--agent-exec", "a shell command started once per step, in the workspace, with SREMARATHON_OBSERVATION, "
        "SREMARATHON_MCP_URL, SREMARATHON_MCP_CONFIG, SREMARATHON_TOKEN and KUBECONFIG (instead of --agent)",
        metavar="COMMAND")
    add("--marathon-seeds", "comma-separated seeds; one marathon per seed (default: the scenario's seed)",
        metavar="N[,N…]")
    add("--marathon-backend", "cluster backend: twin (default), kind (a two-zone kind cluster), kubeconfig:PATH "
        "(an existing cluster) or one registered by a pytest_sremarathon_backends hook", metavar="NAME")
    add("--marathon-keep-cluster", "keep the kind cluster a run created (the next run reuses it)", ini_type="bool",
        action="store_true", default=None)
    add("--marathon-out", f"directory for sealed bundles (default: <rootdir>/{DEFAULT_OUT})", metavar="DIR")
    add("--marathon-min-score", "fail the session when a marathon scores below this (0-100)", metavar="N")
    add("--marathon-baseline", "baseline results file: faults that failed in it are expected failures "
        "(xfail strict); a fault that passed in it and fails now is a regression", metavar="FILE")
    add("--marathon-update-baseline", "rewrite --marathon-baseline with this session's results", ini_type="bool",
        action="store_true", default=None)
    add("--marathon-step-budget", "wall seconds an agent step may take (default: the scenario's)", metavar="SECONDS")
    add("--marathon-think-time", "what the agent's thinking costs in virtual time: frozen, per-request:SECONDS "
        "(each request the agent makes costs SECONDS) or wall[:FACTOR] (the step's wall time x FACTOR); default: "
        "the scenario's agent.think_time", metavar="MODE")
    add("--marathon-signing-key", "ed25519 private key file to sign bundles with", metavar="FILE")
    add("--marathon-scenario", "the session's marathon: a built-in scenario's name (" + builtin.names_line() +
        ") or a scenario file. It runs when no marathon file is collected, and it is the marathon of the "
        "marathon fixtures (a marathon_scenario marker wins). Default: <rootdir>/scenarios/marathon.yaml "
        "if there is one, else the built-in default", metavar="NAME|FILE")
    parser.addini("marathon_progress_interval", "at least this many wall seconds between two progress lines of "
                  f"a marathon (default {DEFAULT_PROGRESS_SECONDS:g}; 0 = every virtual hour)", default=None)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


# -- start and end of the process -------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """With ``-n`` and no ``--dist``, pick ``loadgroup`` (before xdist picks ``load``)."""
    from .distributed import choose_dist

    choose_dist(config)


def pytest_configure(config: pytest.Config) -> None:
    from .distributed import distributing, take_from_controller
    from .session import SESSION_KEY, MarathonSession
    from .settings import read_settings

    config.addinivalue_line("markers", "sremarathon: a marathon segment (added by pytest-sremarathon)")
    config.addinivalue_line("markers", "marathon_scenario(name_or_path, seeds=None): the marathon (a built-in "
                                       "scenario's name, or a path relative to the rootdir) the marathon fixtures "
                                       "(cluster, fault_schedule, agent, marathon, marathon_result) of this test use")
    session = config.stash[SESSION_KEY] = MarathonSession(config, read_settings(config))
    if session.settings.has_agent:  # without an agent no marathon runs: none of these hooks are needed
        config.pluginmanager.register(_AgentHooks(session), "sremarathon-session")
    _ = session.baseline  # a missing or broken baseline file is a usage error now, not in a test
    if distributing(config):
        # Workers' usage errors never reach the user: check on the controller, once.
        session.check_before_distributing()
    if take_from_controller(config):
        session.agent_checked = True


def pytest_unconfigure(config: pytest.Config) -> None:
    from .session import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    from .distributed import AUTO_DIST_KEY
    from .session import display_path, session_of

    ms = session_of(config)
    s = ms.settings
    if not s.has_agent:
        return []
    who = s.agent or (f"cmd: {s.agent_cmd}" if s.agent_cmd else f"exec: {s.agent_exec}")
    lines = [f"sremarathon: agent {who}; backend {s.backend}; bundles in {display_path(config, s.out)}"]
    if ms.fallback_allowed():
        lines.append(f"sremarathon: without a marathon file in the test paths, the {ms.scenario_words()} runs")
    if s.baseline is not None:
        lines.append(f"sremarathon: baseline {display_path(config, s.baseline)}"
                     + (" (will be rewritten)" if s.update_baseline else ""))
    if config.stash.get(AUTO_DIST_KEY, False):
        lines.append("sremarathon: --dist loadgroup (each marathon on one worker, in segment order)")
    return lines


# -- collection -----------------------------------------------------------------------------
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Optional[pytest.Collector]:
    if file_path.suffix not in (".yaml", ".yml"):
        return None
    explicit = any(Path(a.split("::")[0]).resolve() == file_path.resolve() for a in parent.config.args)
    if explicit or file_path.name.startswith("marathon"):
        from .items import MarathonFile

        return MarathonFile.from_parent(parent, path=file_path)
    return None


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    """After the test paths, the session collects its scenario (``items.SessionMarathon``); it
    yields items only if no marathon file was found in them."""
    report = yield
    if isinstance(collector, pytest.Session) and report.passed:
        from .session import SESSION_KEY, scenario_id

        ms = collector.config.stash.get(SESSION_KEY, None)
        if ms is not None and ms.fallback_allowed():
            from .items import SessionMarathon

            path = ms.settings.session_scenario(collector.config.rootpath)
            nodeid = scenario_id(collector.config, path)
            report.result.append(SessionMarathon.from_parent(collector, path=path, name=nodeid, nodeid=nodeid))
    return report


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Plain test functions that use the marathon fixtures run once per marathon seed."""
    if "sremarathon_target" not in metafunc.fixturenames:
        return
    from .fixtures import targets_for

    metafunc.parametrize("sremarathon_target", targets_for(metafunc))


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> Iterator[None]:
    """Before the other plugins: collection's usage errors (no agent, one that does not load),
    raised once every file was collected. After them (xdist's worker side included): the
    ``@<group>`` node id suffixes that keep a marathon on one worker."""
    from .distributed import add_group_suffixes
    from .session import session_of

    errors = session_of(config).usage_errors
    if errors:
        raise pytest.UsageError(errors[0])
    result = yield
    add_group_suffixes(config, items)
    return result


def pytest_report_collectionfinish(config: pytest.Config, start_path: Path, items: list[pytest.Item]) -> list[str]:
    from .session import SESSION_KEY

    ms = config.stash.get(SESSION_KEY, None)
    if ms is None or ms.fallback is None:
        return []
    from . import builtin

    name = builtin.builtin_name(ms.fallback.path)
    facts = f"{builtin.builtin_scenarios()[name].facts()}; " if name else ""
    return [f"sremarathon: no marathon file in the test paths: running the {ms.scenario_words()} as "
            f"{ms.fallback.nodeid} ({facts}--marathon-scenario NAME|FILE picks another)"]


# -- running --------------------------------------------------------------------------------
@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    from .session import session_of

    if not session_of(item.config).settings.has_agent:
        return report  # no marathon item or fixture can run without an agent
    from .items import RESULT_KEY, SegmentItem

    if isinstance(item, SegmentItem):
        report.sremarathon_segment = True
        result = item.stash.get(RESULT_KEY, None)
        if result is not None and call.when == "call":
            from .html_extras import add_extras

            # Carried on the report object (serialised by xdist), like Hypothesis's statistics.
            report.sremarathon = result.to_dict()
            add_extras(item, report, result)
    elif call.when == "call":
        from .fixtures import fixture_report_data

        data = fixture_report_data(item)
        if data is not None:
            report.sremarathon = data
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """Seal the runs no test finished and give the JUnit file its properties (before pytest's
    JUnit writer writes it); on the controller, gate on ``--marathon-min-score`` and rewrite
    the baseline file (before the terminal summary reports both)."""
    from .distributed import is_worker
    from .session import session_of

    ms = session_of(session.config)
    ms.seal_unfinished()
    if ms.board.rows:  # (a session without marathons need not import the JUnit module)
        from .junit import suite_properties

        suite_properties(session.config, ms.board)
    if ms.settings.has_agent and not is_worker(session.config):
        ms.gate(session)
        ms.update_baseline()


# -- pytest-xdist (its hooks, called on the controller only) ---------------------------------
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Hand each new worker the controller's decisions (``--dist loadgroup``, agent checked)."""
    from .distributed import distributing, hand_to_worker
    from .session import session_of

    if distributing(node.config):
        hand_to_worker(node.config, node, session_of(node.config).agent_checked)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """Take back the results of runs no report carried (sealed when the worker's session ended)."""
    from .distributed import distributing, results_from_worker
    from .session import session_of

    if distributing(node.config):
        board = session_of(node.config).board
        for data in results_from_worker(node):
            board.add(data, "")


class _AgentHooks:
    """The hooks of a session with an agent. An object, because ``pytest_runtest_logreport`` is
    given the report and no config; registered at ``pytest_configure``, where the session object
    used to be, because pluggy calls later registrations first: the terminal summary keeps its
    place among the other plugins' (after pytest's JUnit line, before a conftest's)."""

    def __init__(self, session: MarathonSession) -> None:
        from .junit import Testcases

        self.session = session
        self.testcases: Testcases = Testcases(session.config)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Iterator[None]:
        """Runs on the controller for every report, the workers' included: the scoreboard, and
        the JUnit testcase's names and attachment."""
        from .distributed import GROUP_PREFIX, strip_group
        from .scoreboard import report_outcome

        data = getattr(report, "sremarathon", None)
        segment = bool(getattr(report, "sremarathon_segment", False))
        nodeid = strip_group(report.nodeid)
        ours = segment or (nodeid != report.nodeid and f"@{GROUP_PREFIX}" in report.nodeid)
        testcase = None
        if ours:
            # pytest reads a bracket in a middle id component as the last one's parameters
            # ("…segment-01]"), and xdist appends "@<group>": give the testcase its plain names.
            testcase = self.testcases.name(report, nodeid, segment, data["bundle"] if data and segment else None)
        if data and report.when == "call":
            self.session.board.add(data, report_outcome(report))
        try:
            return (yield)
        finally:
            if testcase is not None and report.when == "teardown":
                self.testcases.finish(report, testcase)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        from .distributed import is_worker
        from .session import display_path

        ms = self.session
        if is_worker(config) or not ms.board.rows:
            return
        tr = terminalreporter
        tr.write_sep("=", "SRE marathon results")
        for line in ms.board.table():
            tr.write_line(line)
        from .scoring import weights_line  # heavy: only once a marathon ran

        tr.write_line(weights_line())
        modes = {r.id: (r.final or {}).get("think_time") for r in ms.board.rows.values()}
        if any(modes.values()):
            if len(set(modes.values())) == 1:
                tr.write_line(f"think time: {next(iter(modes.values()))}")
            else:
                tr.write_line("think time: " + ", ".join(f"{k} {v or '-'}" for k, v in sorted(modes.items())))
        if ms.settings.baseline is not None:
            for line in ms.board.baseline_lines(display_path(config, ms.settings.baseline)):
                tr.write_line(line)
        if ms.baseline_written:
            tr.write_line(f"baseline updated: {ms.baseline_written}")
        for line in ms.not_gated:
            tr.write_line(f"not gated: {line}", yellow=True)
        for line in ms.gate_failures:
            tr.write_line(f"FAILED gate: {line}", red=True, bold=True)
