"""Hook specifications (pluggy). Implement them in a ``conftest.py`` or a plugin (functions
named like the spec, optionally with ``@pytest.hookimpl`` options); outside pytest
(``sremarathon run``) plugins registered under the ``sremarathon`` entry-point group are loaded
into the same hooks. docs/HOOKS.md has an example of each.

The names start with ``pytest_`` because pytest only takes functions named ``pytest_*`` as
hook implementations (like ``pytest_xdist_*`` and ``pytest_benchmark_*``). The marker's project
is ``pytest`` so one ``@pytest.hookimpl`` serves both worlds.

========================================  =========  ================================================
hook                                      called     for
========================================  =========  ================================================
``pytest_sremarathon_fault_kinds``        per run    adding fault kinds to the registry
``pytest_sremarathon_backends``           per run    adding cluster backends (``--marathon-backend``)
``pytest_sremarathon_adjust_observation`` per step   changing what the agent is about to see
``pytest_sremarathon_step_report``        per step   receiving each step's outcome and report
``pytest_sremarathon_choose_scorer``      per run    choosing the scorer (first non-None result wins)
========================================  =========  ================================================

Hooks run in the process that runs the marathon (with ``pytest -n``, on the xdist worker that
owns it), so implement them in a ``conftest.py`` or plugin that the workers load too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import pluggy

if TYPE_CHECKING:
    from .agent_host import StepOutcome
    from .agent.protocol import ObservationWire
    from .bundle import Bundle
    from .faults.base import FaultKind
    from .marathon import Marathon
    from .scoring import MarathonScore

hookspec = pluggy.HookspecMarker("pytest")

# pluggy reads a hookspec's signature and never runs its body, so a spec that declares what its
# implementations return has no return statement (pytest's own hookspecs carry the same ignore).


@hookspec
def pytest_sremarathon_fault_kinds() -> "list[type[FaultKind]]":  # type: ignore[empty-body]
    """Return fault kinds (subclasses of :class:`pytest_sremarathon.faults.base.FaultKind`) to
    add to the registry; a kind with a built-in kind's ``name`` replaces it.

    A kind has ``name`` and ``family`` class attributes and implements ``inject(world, fault)``,
    ``mitigated(world, fault) -> bool`` and ``cleanup(world, fault)`` (``world`` is the
    :class:`~pytest_sremarathon.marathon.Marathon`). The schedule picks kinds by family, with the
    scenario's ``schedule.families`` weights, so a kind of a new family runs when the scenario
    gives that family a weight. A kind may define ``choose(rng, targets, free)`` to pick its own
    target; without it, it is scheduled against ``app="cluster"`` with empty params.

    Called when a :class:`Marathon` is created (once per run).
    """


@hookspec
def pytest_sremarathon_backends() -> "dict[str, Callable[..., Any]]":  # type: ignore[empty-body]
    """Return ``{name: factory}`` for additional cluster backends, selectable with
    ``--marathon-backend NAME`` (``marathon_backend`` in the ini file).

    A factory is called like :class:`pytest_sremarathon.backends.twin.TwinBackend`:
    ``factory(scenario, clock, *, emit, admission, private_dir, tokens)``, and returns an object
    with ``store``, ``cluster``, ``pipelines`` and ``server`` attributes and ``tick(dt, rng)`` and
    ``close()`` methods. Subclassing ``TwinBackend`` is the easy way to get them.

    Called when the plugin reads its options (to check ``--marathon-backend``) and when a run
    starts; the run's ``run.start`` record names the backend.
    """


@hookspec
def pytest_sremarathon_adjust_observation(observation: "ObservationWire", marathon: "Marathon") -> None:
    """Change the observation in place before the agent sees it: drop or relabel alerts
    (``observation.alerts`` / ``observation.new_alerts``), e.g. to study an agent under less
    telemetry. The recorded evidence and the scoring are not affected; the agent's findings
    still have to name real alert ids to count.

    Called before every agent step, in the marathon's process.
    """


@hookspec
def pytest_sremarathon_step_report(step: int, outcome: "StepOutcome", marathon: "Marathon") -> None:
    """Receive every agent step's result: ``outcome.outcome`` (``ok``, ``error``, ``timeout``,
    ``invalid``, ``dead``), ``outcome.report`` (the validated :class:`Report`, or None),
    ``outcome.error`` and ``outcome.wall_seconds``. ``marathon.clock.now`` is the step's virtual
    time. For live dashboards, extra logging, or stopping a hopeless run early (raise to stop it;
    the segment in progress fails and the bundle is sealed with the error).

    Called after every agent step has been recorded.
    """


@hookspec(firstresult=True)
def pytest_sremarathon_choose_scorer(bundle: "Bundle") -> "Optional[Callable[[Bundle], MarathonScore]]":
    """Return a scoring function for this sealed bundle, or None to leave the choice to the
    next implementation (the first non-None result wins; with none, Marathon-Score).

    The chosen function gives the run's final score: the last segment's properties, the
    terminal summary, ``--marathon-min-score``, and the ``marathon_result`` fixture. Segment
    assertions (each fault's correlated / localized / repaired-while-active stages) stay the
    Marathon-Score stages.

    Called once per run, after the bundle is sealed.
    """


class _StandalonePluginManager(pluggy.PluginManager):
    """Also takes implementations under the hooks' earlier names (``sremarathon_*``, without
    the ``pytest_`` prefix) in plugins loaded outside pytest."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is not None and name.startswith("sremarathon_") and not opts.get("specname"):
            opts = {**opts, "specname": "pytest_" + name}
        return opts


def standalone_plugin_manager() -> pluggy.PluginManager:
    """The plugin manager used outside pytest (the CLI)."""
    import sys

    pm = _StandalonePluginManager("pytest")
    pm.add_hookspecs(sys.modules[__name__])
    pm.load_setuptools_entrypoints("sremarathon")
    return pm
