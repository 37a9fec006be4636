"""The rules of the game, as the MCP server gives them (resource ``sremarathon://rules``, the
prompt ``sre_marathon`` and the server's instructions): what an agent needs to know to play
without reading this project's README."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Game:
    """What the rules text is made from (the scenario's values for this run)."""

    scenario: str
    apps: tuple[str, ...]
    cadence_seconds: float
    step_budget_seconds: float
    think_time: str
    policy_rules: tuple[str, ...]
    limits: str


def rules_text(g: Game) -> str:
    minutes = g.cadence_seconds / 60
    return f"""\
# SRE marathon: the rules of the game (scenario {g.scenario})

You are the on-call SRE of a Kubernetes cluster in two zones (zone-a, zone-b) running these
applications, one namespace each: {", ".join(g.apps)}. Dozens of faults arrive over the run and
overlap, most as code or configuration changes deployed through each app's pipeline; the rest
are infrastructure (nodes, zones, datastores, external dependencies, traffic surges). Alerts are
noisy: most are not actionable.

## Steps
You are invoked every {minutes:g} virtual minutes (a step), with the alert history. A step may
take {g.step_budget_seconds:g} wall seconds; past that it is cut off. Thinking costs virtual time
({g.think_time}): every request you make lets the cluster run on. What you submit with
report_finding and claim_resolved during a step is that step's report; a finding stays made once
reported (report it again only to change it).

## Identifiers (scoring matches these strings exactly)
- components: service:<app>/<service> (service:shop/cart), node:<node> (node:worker-a1),
  zone:<zone> (zone:zone-b), external:<name> (external:payment-gateway)
- causes: change:<change id> (the pipeline change that introduced the fault, as
  pipeline_changes lists it), or kind:<fault kind>
- alerts: the ids the alerts tool lists; incidents: your own keys.

## What is scored, per fault (0-100, the mean over faults)
- correlation (20): a finding made while the fault is active groups alerts that belong to it,
  and mostly those;
- localization (30): that finding names the fault's root-cause component (or its change);
  naming k candidates earns at most 1/k;
- repair (50): while the fault is still active, one of your own actions makes its mitigation
  condition true and it holds (revert the faulty change through the pipeline, restart, scale,
  cordon and drain, set a fallback). Touching unrelated objects earns nothing.
Also reported: claims of resolution made while the fault was still active (false claims), and
what you disturbed that was healthy.

## The policy point
Every write passes it (rules: {", ".join(g.policy_rules)}): deleting namespaces or nodes, touching
the monitoring, kube-system or sremarathon-system namespaces, silencing alerts, scaling
everything to zero and reading Secrets are refused (403) and recorded.

## Your process
It is isolated and limited ({g.limits}); crossing a limit ends the step. Your workspace (the
working directory) persists across steps and holds a git checkout of every app: commit a fix
there and pipeline_deploy 'HEAD'.
"""
