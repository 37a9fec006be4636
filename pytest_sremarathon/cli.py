"""The ``sremarathon`` command: ``run`` a marathon outside pytest, ``verify`` and ``score``
bundles, and the tools around them.

Every command that takes ``--scenario`` accepts a built-in scenario's name (``sremarathon
scenarios`` lists them) or a scenario file; without one it runs ``./scenarios/marathon.yaml``
when the current directory has one, else the built-in ``default``. So the commands work from any
directory with the installed package alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Optional

from . import __version__, builtin, cli_bundle, cli_init, cli_kinds, report
from .agent.loader import AgentLoadError, check_agent
from .agent_host import AgentSpec
from .errors import ConfigError, SremarathonError
from .marathon import Marathon, MarathonOptions, Progress, RunResult
from .scenario import Scenario, load_scenario
from .scoring import format_table
from .thinktime import think_time_option

DEFAULT_OUT = Path("sremarathon-runs")
SCENARIO_HELP = ("a built-in scenario's name (" + ", ".join(builtin.builtin_scenarios()) + "; `sremarathon "
                 "scenarios` lists them) or a scenario file (default: ./scenarios/marathon.yaml if there is one, "
                 "else the built-in default)")


def _fail(message: str) -> int:
    print(f"sremarathon: error: {message}", file=sys.stderr)
    return 2


def scenario_path(value: Optional[str]) -> Path:
    """The file of ``--scenario``: a built-in's for a name, ``value`` for a path, and without
    one ``./scenarios/marathon.yaml`` if there is one, else the built-in ``default``."""
    if value is None:
        return builtin.default_scenario(Path.cwd())
    if not builtin.is_name(value):
        return Path(value).expanduser()
    try:
        return builtin.builtin_path(value)
    except builtin.UnknownScenario as exc:
        raise ConfigError(f"--scenario {value}: {exc}, or give the path of a scenario .yaml file") from None


def open_scenario(value: Optional[str]) -> Scenario:
    return load_scenario(scenario_path(value))


def add_scenario_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", metavar="NAME|FILE", help=SCENARIO_HELP)


def add_run_options(p: argparse.ArgumentParser) -> None:
    who = p.add_mutually_exclusive_group(required=True)
    who.add_argument("--agent", metavar="PKG.MOD:CLASS", help="the agent class, e.g. pytest_sremarathon.baselines:RollbackAgent")
    who.add_argument("--agent-cmd", metavar="COMMAND", help="a command speaking the JSON-lines agent protocol")
    who.add_argument("--agent-exec", metavar="COMMAND", help="a shell command started once per step (in the workspace, "
                     "with SREMARATHON_OBSERVATION, SREMARATHON_MCP_URL, SREMARATHON_MCP_CONFIG, SREMARATHON_TOKEN)")
    add_scenario_option(p)
    p.add_argument("--seed", type=int, help="seed of the run (default: the scenario's)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where bundles go (default: %(default)s)")
    p.add_argument("--step-budget", type=float, metavar="SECONDS", help="wall seconds per agent step")
    p.add_argument("--signing-key", type=Path, metavar="FILE", help="ed25519 private key to sign the bundle with")
    p.add_argument("--duration", metavar="DURATION", help="override the run length (e.g. 2h) for a quick run")
    p.add_argument("--think-time", metavar="MODE",
                   help="what the agent's thinking costs in virtual time: frozen, per-request:SECONDS (each "
                        "request the agent makes costs SECONDS) or wall[:FACTOR] (the step's wall time × FACTOR); "
                        "default: the scenario's agent.think_time")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def result_json(result: RunResult) -> dict[str, Any]:
    score = result.score
    return {
        "score": round(score.score, 3),
        "declared_done_gap": round(score.declared_done_gap, 3),
        "false_resolution_rate": score.false_resolution_rate,
        "bundle": str(result.bundle),
        "run_id": result.run_id,
        "think_time": result.think_time,
        "virtual_seconds": result.virtual_seconds,
        "wall_seconds": round(result.wall_seconds, 3),
        "isolation": result.isolation,
        "weights": score.weights,
        "scoring_version": score.scoring_version,
        "correlated": score.correlated, "localized": score.localized,
        "localization_credit": round(score.localization_credit, 3), "repaired": score.repaired,
        "collateral": {k: len(v) for k, v in score.collateral.items()},
        "faults": [{"id": f.id, "kind": f.kind, "component": f.component, "change": f.change,
                    "start": f.start, "end": f.end, "correlated": f.correlated, "localized": f.localized,
                    "localization_credit": round(f.localization_credit, 6), "candidates": f.candidates,
                    "repaired": f.repaired, "repair_actions": f.repair_actions, "points": round(f.points, 6)}
                   for f in score.faults],
    }


def _progress_printer(quiet: bool) -> Optional[Any]:
    if quiet:
        return None

    def show(p: Progress) -> None:
        done = p.now.strftime("%H:%M")
        print(f"  [{done} of {p.end.strftime('%H:%M')} virtual] faults injected {p.injected}, active {p.active}, "
              f"alerts firing {p.firing}, agent steps {p.steps}", file=sys.stderr, flush=True)

    return show


def cmd_run(args: argparse.Namespace) -> int:
    from .bundle import load_signing_key
    from .scenario import parse_duration

    try:
        scenario = open_scenario(args.scenario)
        if args.duration:
            scenario = scenario.with_overrides(duration=parse_duration(args.duration))
        think = think_time_option(args.think_time, "--think-time")
        if args.agent:
            check_agent(args.agent)  # fail fast, in one line, before starting anything
        spec = AgentSpec.from_options(args.agent, args.agent_cmd, agent_exec=args.agent_exec)
        key = load_signing_key(args.signing_key) if args.signing_key else None
    except (SremarathonError, AgentLoadError, ValueError, OSError) as exc:
        return _fail(str(exc))
    seed = args.seed if args.seed is not None else scenario.spec.seed
    options = MarathonOptions(agent=spec, seed=seed, out_dir=args.out, step_budget=args.step_budget,
                              signing_key=key, progress=_progress_printer(args.quiet or args.json), think_time=think)
    from .hookspecs import standalone_plugin_manager

    marathon = Marathon(scenario, options, hook=standalone_plugin_manager().hook)
    if not (args.quiet or args.json):
        print(f"sremarathon: {scenario.name} seed {seed} ({builtin.describe(scenario.path)}), "
              f"{len(scenario.apps)} app(s), {scenario.spec.duration / 3600:g} virtual hours, agent {spec.label}, "
              f"think time {think or scenario.spec.agent.think}",
              file=sys.stderr, flush=True)
    try:
        result = marathon.run()
    except SremarathonError as exc:
        return _fail(str(exc))
    except Exception as exc:  # a bug of ours: the evidence is sealed, say where, keep the trace short
        import traceback

        where = traceback.extract_tb(exc.__traceback__)[-1]
        bundle = marathon.result.bundle if marathon.result else marathon.run_dir
        print(f"sremarathon: internal error: {type(exc).__name__}: {exc} ({where.filename}:{where.lineno})\n"
              f"sremarathon: the run so far is sealed in {bundle}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result_json(result), indent=None))
    else:
        print(format_table(result.score))
        print(f"\nMarathon-Score: {result.score.score:.1f} / 100   "
              f"(virtual {result.virtual_seconds / 3600:g} h in {result.wall_seconds:.1f} s wall; "
              f"think time {result.think_time})")
        print(f"bundle: {result.bundle}")
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    from .calibration import describe, overlapping
    from .clock import EPOCH
    from .faults import builtin_registry
    from .hookspecs import standalone_plugin_manager
    from .schedule import generate
    from .timeline import render_svg

    try:
        scenario = open_scenario(args.scenario)
    except SremarathonError as exc:
        return _fail(str(exc))
    seed = args.seed if args.seed is not None else scenario.spec.seed
    registry = builtin_registry(standalone_plugin_manager().hook.pytest_sremarathon_fault_kinds())
    schedule = generate(scenario, registry, seed, EPOCH)
    stats = describe(schedule.faults, len(schedule.benign))
    end = EPOCH + timedelta(seconds=scenario.spec.duration)
    svg_path = args.svg or Path(f"schedule-{scenario.name}-seed{seed}.svg")
    svg_path.write_text(render_svg(schedule.faults, EPOCH, end, [(c.at, c.app) for c in schedule.benign],
                                   title=f"{scenario.name} seed {seed}"))
    if args.json:
        print(json.dumps({"seed": seed, "stats": stats.to_dict(), "timeline": str(svg_path),
                          **schedule.to_json()}, default=str))
        return 0
    overlaps = {f.id for f in overlapping(schedule.faults)}
    print(f"{'fault':<6} {'kind':<28} {'family':<15} {'app':<8} {'start':>6} {'end':>6} {'min':>5}  target")
    for f in schedule.faults:
        target = ", ".join(f"{k}={v}" for k, v in sorted(f.params.items()))
        mark = " *" if f.id in overlaps else ""
        print(f"{f.id:<6} {f.kind:<28} {f.family:<15} {f.app:<8} {f.start:%H:%M} {f.end:%H:%M} "
              f"{(f.end - f.start).total_seconds() / 60:>5.0f}  {target}{mark}")
    print("(* overlaps another fault)\n")
    for line in stats.lines():
        print(line)
    if args.simulate:
        mix = _simulate_alert_mix(scenario, seed)
        low, high = scenario.spec.alerts.non_actionable_band
        verdict = "within" if low <= mix.non_actionable_share <= high else "OUTSIDE"
        print(f"alerts (simulated with NoopAgent): {mix.total}; non-actionable {mix.non_actionable_share:.0%} "
              f"(noise {mix.noise}, symptoms {mix.symptom}, actionable {mix.actionable}) — {verdict} the "
              f"configured band {low:.0%}–{high:.0%}")
    print(f"timeline: {svg_path}")
    return 0


def _simulate_alert_mix(scenario: Any, seed: int) -> Any:
    import shutil
    import tempfile

    from .bundle import open_bundle
    from .calibration import alert_mix

    out = Path(tempfile.mkdtemp(prefix="sremarathon-simulate-"))
    try:
        options = MarathonOptions(agent=AgentSpec(agent="pytest_sremarathon.baselines:NoopAgent"), seed=seed,
                                  out_dir=out)
        result = Marathon(scenario, options).run()
        return alert_mix(open_bundle(result.bundle).events)
    finally:
        shutil.rmtree(out, ignore_errors=True)


class _PrintingAdmission:
    """`twin up`: the scenario's policy, with every mutating request printed as it happens."""

    def __init__(self, rules: tuple[str, ...]) -> None:
        from .policy import Policy

        self.policy = Policy(rules)

    def decide(self, req: Any) -> Any:
        return self.policy.decide(req)

    def record(self, req: Any, decision: Any, status: int) -> None:
        verdict = "allowed" if decision.allowed else f"DENIED by {decision.rule}"
        print(f"  {req.verb} {req.target}: {status} ({verdict})", file=sys.stderr, flush=True)


def cmd_twin_up(args: argparse.Namespace) -> int:
    import random
    import secrets
    import shutil
    import signal
    import tempfile
    import time

    from .backends.twin import TwinBackend
    from .clock import EPOCH, VirtualClock

    try:
        scenario = open_scenario(args.scenario)
    except SremarathonError as exc:
        return _fail(str(exc))
    def stop(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # `timeout`, systemd and CI runners stop with SIGTERM
    clock = VirtualClock(EPOCH)
    private = Path(tempfile.mkdtemp(prefix="sremarathon-twin-"))
    token = secrets.token_urlsafe(24)
    backend = TwinBackend(scenario, clock, emit=lambda _type, _data: None,
                          admission=_PrintingAdmission(tuple(scenario.spec.policy.rules)),
                          private_dir=private, tokens={token: "agent"})
    kubeconfig = backend.server.write_kubeconfig(args.kubeconfig.resolve(), token)
    tick = scenario.spec.tick
    try:
        for _ in range(int(120 / tick)):  # two virtual minutes: pods scheduled, started, ready
            clock.advance(tick)
            backend.tick(tick, random.Random(f"twin-up:{clock.now.isoformat()}"))
        print(f"twin up: {', '.join(a.namespace for a in scenario.apps)} on {backend.server.url}", flush=True)
        print(f"kubeconfig: {kubeconfig}", flush=True)
        print(f"  export KUBECONFIG={kubeconfig}; kubectl get pods -A", flush=True)
        for name, url in sorted(backend.urls.items()):  # the monitoring namespace's services
            print(f"{name}: {url} (bearer token: the kubeconfig's)", flush=True)
        proxy, app = backend.monitoring.proxy_url, scenario.apps[0]
        entry = f"{app.traffic.entry}.{app.namespace}"  # Jaeger's service names
        print(f"  kubectl get --raw '{proxy('', 'prometheus', 9090)}/api/v1/query?query=up'", flush=True)
        print(f"  kubectl get --raw '{proxy('', 'alertmanager', 9093)}/api/v2/alerts'", flush=True)
        print(f"  kubectl get --raw '{proxy('', 'jaeger-query', 16686)}/api/traces?service={entry}'",
              flush=True)
        print(f"virtual time runs {args.speed:g} tick(s) of {tick:g}s per wall second; Ctrl-C stops", flush=True)
        while True:
            time.sleep(1.0)
            for _ in range(max(0, int(args.speed))):
                clock.advance(tick)
                backend.tick(tick, random.Random(f"twin-up:{clock.now.isoformat()}"))
    except KeyboardInterrupt:
        print("twin up: stopped", file=sys.stderr)
    finally:
        backend.close()
        shutil.rmtree(private, ignore_errors=True)
    return 0


def cmd_mcp(args: argparse.Namespace) -> int:
    """The run's MCP server over stdio (agent_tools/bridge.py)."""
    from .agent_tools.bridge import BridgeError, main

    try:
        token = args.token_file.read_text().strip() if args.token_file else None
        return main(args.url, token)
    except (BridgeError, OSError) as exc:
        return _fail(str(exc))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sremarathon",
                                     description="Benchmark SRE agents on multi-fault marathons.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("run", help="run a marathon with an agent and print its score",
                       description="Run a marathon on the embedded twin, seal the bundle, print the score.")
    add_run_options(p)
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("schedule", help="print a scenario's fault schedule and draw its timeline",
                       description="The seeded schedule as a table, its calibration statistics, and an SVG timeline.")
    add_scenario_option(p)
    p.add_argument("--seed", type=int, help="seed (default: the scenario's)")
    p.add_argument("--svg", type=Path, help="where to write the timeline (default: schedule-<name>-seed<N>.svg)")
    p.add_argument("--json", action="store_true", help="print the schedule and statistics as JSON")
    p.add_argument("--simulate", action="store_true",
                   help="also run the marathon with NoopAgent and report the alert mix against the configured band")
    p.set_defaults(func=cmd_schedule)
    twin = sub.add_parser("twin", help="the embedded twin on its own").add_subparsers(dest="twin_command",
                                                                                   required=True, metavar="COMMAND")
    p = twin.add_parser("up", help="start a twin with the scenario's apps and keep it running",
                        description="Start the embedded twin with the scenario's applications (no faults) and "
                                    "serve it until interrupted, to explore with kubectl.")
    add_scenario_option(p)
    p.add_argument("--kubeconfig", type=Path, default=Path("sremarathon-twin.kubeconfig"),
                   help="where to write the kubeconfig (default: %(default)s)")
    p.add_argument("--speed", type=float, default=1.0, help="simulation ticks per wall second (default: 1)")
    p.set_defaults(func=cmd_twin_up)
    p = sub.add_parser("mcp", help="the running marathon's MCP tools over stdio (for MCP clients that spawn servers)",
                       description="Relay stdio to the run's MCP server (streamable HTTP): an agent of a running "
                                   "marathon has SREMARATHON_MCP_URL and SREMARATHON_TOKEN, which this reads.")
    p.add_argument("--url", help="the MCP endpoint (default: $SREMARATHON_MCP_URL)")
    p.add_argument("--token-file", type=Path, metavar="FILE", help="a file holding the token (default: $SREMARATHON_TOKEN)")
    p.set_defaults(func=cmd_mcp)
    cli_bundle.add_parsers(sub)
    cli_kinds.add_parsers(sub)
    report.add_parser(sub)
    cli_init.add_parsers(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
