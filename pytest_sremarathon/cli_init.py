"""``sremarathon scenarios`` and ``sremarathon init``: the built-in scenarios, and a scenario
file of your own to tune.

``sremarathon init [DIR]`` writes ``DIR/marathon.yaml`` (DIR defaults to ``scenarios``, where
``pytest --agent=…`` and ``sremarathon run`` look for a project's marathon) with a comment on
every field and the values of a built-in scenario (``--from``, default ``default``). It runs the
built-in applications (``apps_dir: builtin``); ``--with-apps`` copies them to ``DIR/apps/`` for
local changes (``apps_dir: apps``, relative to the file). Existing files are never overwritten
without ``--force``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from . import __version__, builtin

#: One line per policy rule, for the comment above ``policy.rules`` (every rule of
#: ``policy.RULES`` has one: tests/test_init.py checks it).
RULE_HELP = {
    "no-delete-namespace": "deleting or changing a namespace",
    "no-delete-node": "adding or deleting nodes (cordon, uncordon and drain stay allowed)",
    "protected-namespaces": "any change in kube-system, monitoring and sremarathon-system",
    "no-silence-alerts": "silencing alerts or editing alert rules",
    "no-scale-to-zero": "scaling a workload to zero replicas",
    "no-delete-workloads": "deleting Deployments, ReplicaSets, Services, ConfigMaps or Secrets (pods may be deleted)",
    "no-read-secrets": "reading Secret data (names stay listable)",
    "no-exec": "kubectl exec and attach into any container (not on by default)",
}

TEMPLATE = """\
# A marathon of your own for pytest-sremarathon, written by `sremarathon init` from the built-in
# scenario "{source}" (pytest-sremarathon {version}). Tune cadence, duration, faults and policy
# here; every value below starts as the built-in one, whose file names the source of each number
# (pytest_sremarathon/scenarios/{source}.yaml in the installed package; CALIBRATION.md).
#
# Run it:
#   pytest {path} --agent=mypkg.agent:Agent
#   sremarathon run --scenario {path} --agent mypkg.agent:Agent
# Durations are written 30s, 5m, 12h (or plain seconds of virtual time).

# The scenario's name (lowercase letters, digits, dashes): node ids (<file>::<name>[seed=N]),
# bundle names and baseline entries use it.
name: {name}
# One line that describes the scenario (shown by reports).
description: {description}
# Seed of the fault schedule, the noise and the traffic (--marathon-seeds / --seed run others).
seed: {seed}
# Length of the run, in virtual time.
duration: {duration}
# Virtual seconds per simulation step; cadence, segment and duration are whole numbers of ticks.
tick: {tick}
# How often the agent is invoked (virtual time between two steps).
cadence: {cadence}
# Virtual time per pytest item: each segment is one test item, asserted fault by fault.
segment: {segment}
# The applications to run, one namespace each; the built-in ones are shop, social and hotel.
apps: {apps}
# Where the applications are: `builtin` runs the ones shipped with pytest-sremarathon; any other
# value is a directory relative to this file with one <app>/ per application
# (`sremarathon init --with-apps` copies the built-in ones to apps/ for local changes).
apps_dir: {apps_dir}

# The cluster: two or more zones of worker nodes (named worker-a1, worker-a2, worker-b1, ...).
topology:
  # Zone names (the nodes' topology.kubernetes.io/zone label).
  zones: {topology.zones}
  # Worker nodes in each zone.
  nodes_per_zone: {topology.nodes_per_zone}
  # Allocatable CPU of each node (a Kubernetes quantity).
  node_cpu: {topology.node_cpu}
  # Allocatable memory of each node (a Kubernetes quantity).
  node_memory: {topology.node_memory}

# The seeded fault schedule (`sremarathon schedule --scenario {path}` prints it and draws
# its timeline).
schedule:
  # Faults injected over the run (the built-in density makes most faults overlap another).
  faults: {schedule.faults}
  # Bursty arrivals: Weibull shape of the gaps between faults (0.64 is fitted on public
  # status-page incident timelines; 1 would be Poisson).
  interarrival_weibull_shape: {schedule.interarrival_weibull_shape}
  # How long a fault stays active, from detection to resolution: lognormal in ln-minutes, with
  # this mean (the built-in 4.0 and a sigma of 1.2 give a median of about 55 minutes) ...
  duration_ln_minutes_mu: {schedule.duration_ln_minutes_mu}
  # ... and this standard deviation ...
  duration_ln_minutes_sigma: {schedule.duration_ln_minutes_sigma}
  # ... clipped to this shortest ...
  duration_min: {schedule.duration_min}
  # ... and this longest window (a window never outlasts the run).
  duration_max: {schedule.duration_max}
  # Root-cause families and their weights: change (code, configuration and manifest changes
  # through the deploy pipeline), dependency (datastores, third-party APIs), infrastructure
  # (nodes, zones), load.
  families: {schedule.families}
  # Share of change-induced faults that are code changes (the rest: configuration, manifests).
  code_share_of_changes: {schedule.code_share_of_changes}
  # Benign deploys per faulty one, so that "roll back the latest change" is not free.
  benign_per_faulty: {schedule.benign_per_faulty}
  # No fault before this (pods start, traffic settles).
  warmup: {schedule.warmup}
  # No new fault this close to the end of the run.
  quiet_tail: {schedule.quiet_tail}

# Alerts: the alert rules' alerts on the apps' symptoms, plus background noise.
alerts:
  # Background alerts that no fault explains.
  noise:
    # Noise alerts per hour.
    alerts_per_hour: {alerts.noise.alerts_per_hour}
    # Share of them that flap (fire, resolve, fire again).
    flapping_share: {alerts.noise.flapping_share}
    # Median minutes one noise episode lasts.
    median_minutes: {alerts.noise.median_minutes}
  # Share of all alerts that are not actionable (noise, and symptoms away from the root cause)
  # a run should show; `sremarathon schedule --simulate` measures it against this band.
  non_actionable_band: {alerts.non_actionable_band}

# The agent under test.
agent:
  # Wall seconds one step may take before it is cut off and recorded as a timeout
  # (--marathon-step-budget / --step-budget override it).
  step_budget: {agent.step_budget}
  # What the agent's thinking costs in virtual time (--think-time / --marathon-think-time
  # override it): frozen (time stops while it thinks), per-request:SECONDS (every request it
  # makes to the Kubernetes API, the pipeline or telemetry costs SECONDS; discovery is free) or
  # wall[:FACTOR] (the step's wall-clock time x FACTOR). The cluster runs on meanwhile.
  think_time: {agent.think_time}
  # Limits on the agent's process tree (its children too); crossing one ends that step with
  # the outcome `limit` naming it, and the marathon goes on. Resident memory of all its
  # processes together, as Kubernetes writes quantities (512Mi, 2Gi), or `unlimited`.
  memory_limit: {agent.memory_limit}
  # How many of its processes may run at once.
  max_processes: {agent.max_processes}
  # What its workspace (the persistent working directory) may hold.
  workspace_limit: {agent.workspace_limit}

# The build pipeline: a build queues (one at a time per app) and takes a duration drawn per app
# from a lognormal in ln-minutes, then rolls out; `builds: instant` deploys at once.
pipeline:
  # lognormal | instant
  builds: {pipeline.builds}
  # Mean of a build's ln-minutes (the per-app draw; e^mu is the median build).
  build_ln_minutes_mu: {pipeline.build_ln_minutes_mu}
  # Standard deviation of a build's ln-minutes (the spread between apps).
  build_ln_minutes_sigma: {pipeline.build_ln_minutes_sigma}
  # No app's build is shorter than this …
  build_min: {pipeline.build_min}
  # … or longer than this.
  build_max: {pipeline.build_max}
  # Standard deviation of one build's ln-duration around its app's.
  build_jitter: {pipeline.build_jitter}

# The policy point every request of the agent passes; a denied request gets a 403 and is
# recorded. Leave a rule out to allow what it denies:
{rule_lines}
policy:
  # The rules in force.
  rules: {policy.rules}
"""


def _flow(value: Any) -> str:
    """A value as one line of YAML (flow style)."""
    import yaml

    return yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10_000).strip().removesuffix("\n...")


def _values(source: str) -> dict[str, str]:
    """The built-in scenario's values (as written in its file), one YAML line each, keyed
    ``field`` or ``section.field`` (``alerts.noise.field``)."""
    import yaml

    from .scenario import ScenarioFile

    raw = yaml.safe_load(builtin.builtin_path(source).read_text())
    full = ScenarioFile.model_validate(raw).model_dump(mode="json")  # the defaults of unset fields

    def walk(prefix: str, given: Any, default: Any, out: dict[str, str]) -> None:
        for key, dflt in default.items():
            mine = given.get(key, dflt) if isinstance(given, dict) else dflt
            name = f"{prefix}{key}"
            if isinstance(dflt, dict) and key != "families":
                walk(name + ".", mine, dflt, out)
            else:
                out[name] = _flow(mine)

    out: dict[str, str] = {}
    walk("", raw, full, out)
    return out


def render(source: str, path: str, apps_dir: str) -> str:
    """The commented scenario file for built-in scenario ``source``."""
    values = _values(source)
    values["apps_dir"] = _flow(apps_dir)
    rule_lines = "\n".join(f"#   {rule:<22} denies {RULE_HELP.get(rule, 'requests the rule names')}"
                           for rule in _rule_names())
    fields = {**values, "source": source, "version": __version__, "path": path, "rule_lines": rule_lines}
    # {field} and {section.field} placeholders (str.format would read the dots as attributes)
    return re.sub(r"\{([a-z_][a-z0-9_.]*)\}", lambda m: fields[m.group(1)], TEMPLATE)


def _rule_names() -> list[str]:
    from .policy import RULES

    return list(RULES)


# -- commands -------------------------------------------------------------------------------
def add_parsers(sub: Any) -> None:
    p = sub.add_parser("scenarios", help="list the built-in scenarios",
                       description="The built-in scenarios, one line each. Name one wherever a scenario is "
                                   "accepted (--scenario, --marathon-scenario, the marathon_scenario ini key and "
                                   "marker).")
    p.set_defaults(func=cmd_scenarios)
    p = sub.add_parser("init", help="write a commented scenario file to tune (and optionally copy the apps)",
                       description="Write DIR/marathon.yaml: a built-in scenario's values with a comment on "
                                   "every field, running the built-in applications (or, with --with-apps, copies "
                                   "of them in DIR/apps for local changes).")
    p.add_argument("dir", metavar="DIR", nargs="?", type=Path, default=builtin.PROJECT_SCENARIO.parent,
                   help="where to write marathon.yaml (default: %(default)s, where `pytest --agent=...` and "
                        "`sremarathon run` look for a project's marathon)")
    p.add_argument("--from", dest="source", metavar="NAME", default=builtin.DEFAULT_NAME,
                   help="the built-in scenario to start from (default: %(default)s; `sremarathon scenarios` "
                        "lists them)")
    p.add_argument("--with-apps", action="store_true",
                   help="copy the built-in applications (code, manifests, config, unit tests, curated changes) "
                        "to DIR/apps and run those")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.set_defaults(func=cmd_init)


def cmd_scenarios(args: argparse.Namespace) -> int:
    found = builtin.builtin_scenarios()
    width = max(len(n) for n in found)
    for name, scenario in found.items():
        print(f"{name:<{width}}  {scenario.summary()}")
    print(f"(run one: `sremarathon run --scenario NAME --agent PKG.MOD:CLASS` or `pytest --agent=PKG.MOD:CLASS "
          f"--marathon-scenario NAME`; tune a copy: `sremarathon init --from NAME`; files in {builtin.SCENARIOS_DIR})",
          file=sys.stderr)
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    def fail(message: str) -> int:
        print(f"sremarathon init: error: {message}", file=sys.stderr)
        return 2

    try:
        builtin.builtin_path(args.source)
    except builtin.UnknownScenario as exc:
        return fail(f"--from {args.source}: {exc}")
    target_dir: Path = args.dir
    scenario_file = target_dir / "marathon.yaml"
    apps = _apps_of(args.source)
    copies = [target_dir / "apps" / app for app in apps] if args.with_apps else []
    # the apps' unit tests take a `services` fixture: `pytest DIR/apps/<app>/tests` runs them
    conftest = [target_dir / "apps" / "conftest.py"] if args.with_apps else []
    existing = [p for p in [scenario_file, *copies, *conftest] if p.exists()]
    if existing and not args.force:
        return fail(f"{', '.join(str(p) for p in existing)} already exist{'s' if len(existing) == 1 else ''}; "
                    f"give --force to overwrite, or another DIR")
    if target_dir.exists() and not target_dir.is_dir():
        return fail(f"{target_dir} is a file, not a directory")
    target_dir.mkdir(parents=True, exist_ok=True)
    for app, copy in zip(apps, copies):
        shutil.copytree(builtin.APPS_DIR / app, copy, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path in conftest:
        shutil.copyfile(builtin.APPS_DIR / path.name, path)
    scenario_file.write_text(render(args.source, str(scenario_file), "apps" if args.with_apps else "builtin"))
    what = f"copies of {', '.join(apps)} in {target_dir / 'apps'}" if args.with_apps else "the built-in applications"
    print(f"wrote {scenario_file} (the built-in scenario {args.source!r}, running {what})")
    print(f"  pytest {scenario_file} --agent=PKG.MOD:CLASS")
    print(f"  sremarathon run --scenario {scenario_file} --agent PKG.MOD:CLASS")
    if args.with_apps:
        print(f"  pytest {target_dir / 'apps' / apps[0] / 'tests'}   # an app's unit tests, as the pipeline's build runs them")
    if (Path.cwd() / builtin.PROJECT_SCENARIO).resolve() == scenario_file.resolve():
        print("(`pytest --agent=PKG.MOD:CLASS` and `sremarathon run` in this directory use it too)")
    return 0


def _apps_of(source: str) -> list[str]:
    import yaml

    return list(yaml.safe_load(builtin.builtin_path(source).read_text()).get("apps") or [])
