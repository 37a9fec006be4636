"""Reference agents, from the floor of the scoreboard to a capable heuristic SRE.

Run any of them with ``--agent=pytest_sremarathon.baselines:<Name>``:

==================  ==========================================================================
``NoopAgent``        does nothing and says nothing (the floor: scores 0)
``RollbackAgent``    one incident per alerting service; reverts that service's latest change
``RestartAgent``     one incident per alerting service; ``rollout restart`` of its deployment
``ClaimEverything``  groups nothing, repairs nothing, claims every alert's incident resolved at
                     once: the *declared-done gap* made visible
``HeuristicSRE``     reads the cluster like an on-call engineer: verifies alerts against
                     telemetry, infers the call graph from pod logs, localizes the upstream-most
                     failing component (service, node, zone or external API), picks the repair
                     by symptom (revert the suspect change, cordon and drain, restart, scale,
                     switch on a fallback), checks that it worked and escalates when it did not
``TraceSRE``         investigates as a production agent does: PromQL at ``PROMETHEUS_URL`` ranks
                     the failing services, Jaeger traces at ``JAEGER_URL`` find where each
                     failure began (the deepest erroring span); one incident per root
                     component, reverting its latest change
``LLMAgent``         a tool-using agent for any OpenAI-compatible ``/v1/chat/completions``
                     endpoint: ``kubectl``, the pipeline, findings and claims as tools
==================  ==========================================================================

Adversarial baselines (:mod:`pytest_sremarathon.baselines.adversarial`), agents that try to
game the score without diagnosing or repairing; the test suite bounds what each earns:

======================  ======================================================================
``SprayComponents``      one finding per candidate component (every deployment of the app,
                         every node, every zone) for each alerting service; no actions
``SprayChanges``         one finding per pipeline change of the app in the last 3 virtual
                         hours (``cause="change:<id>"``); no actions
``RotateCandidates``     one finding per alerting service per step, naming a different
                         candidate component each step; no actions
``TouchWithoutFixing``   the component spray, plus metadata-only patches (an annotation, a
                         label) on every Deployment and Node each step; repairs nothing
``SprayAlerts``          correlation gaming: one finding with every alert id seen, plus one per
                         firing alert padded with 5 random other alert ids
``RestartEverything``    ``rollout restart`` of every Deployment in every alerting namespace
                         each step, and every incident claimed resolved
======================  ======================================================================

They use nothing but the public contract (:mod:`pytest_sremarathon.agent.protocol`) and the
Kubernetes API through the official ``kubernetes`` client (or the real ``kubectl``), exactly
like a third-party agent: no private import of the marathon's internals. Each keeps its state
on the instance (the agent process persists between steps) and, if it has any worth keeping,
in a JSON journal in the workspace (:mod:`.journal`), so a restarted process carries on where
the last one stopped.

One module per concept: :mod:`.simple` (NoopAgent, ClaimEverything), :mod:`.per_service`
(the per-service grouping of :mod:`.rollback` and :mod:`.restart`), :mod:`.heuristic` (a
package), :mod:`.llm` (the agent, its prompt and its tools), :mod:`.trace_sre` (over :mod:`.observability`:
the Prometheus and Jaeger clients, what a trace says), :mod:`.adversarial`;
:mod:`.kube_client`, :mod:`.journal`, :mod:`.alerts` and :mod:`.times` are what they share.
This module only re-exports the agents, importing each on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .adversarial import (
        RestartEverything,
        RotateCandidates,
        SprayAlerts,
        SprayChanges,
        SprayComponents,
        TouchWithoutFixing,
    )
    from .heuristic import HeuristicSRE
    from .kube_client import KubeError
    from .llm import LLMAgent, LLMError
    from .restart import RestartAgent
    from .rollback import RollbackAgent
    from .simple import ClaimEverything, NoopAgent
    from .trace_sre import TraceSRE

#: Where each re-exported name lives.
_HOME = {
    "NoopAgent": "simple", "ClaimEverything": "simple", "RollbackAgent": "rollback", "RestartAgent": "restart",
    "HeuristicSRE": "heuristic", "TraceSRE": "trace_sre", "LLMAgent": "llm", "LLMError": "llm", "KubeError": "kube_client",
    "SprayComponents": "adversarial", "SprayChanges": "adversarial", "RotateCandidates": "adversarial",
    "TouchWithoutFixing": "adversarial", "SprayAlerts": "adversarial", "RestartEverything": "adversarial",
}

__all__ = ["NoopAgent", "RollbackAgent", "RestartAgent", "ClaimEverything", "HeuristicSRE", "TraceSRE", "LLMAgent",
           "SprayComponents", "SprayChanges", "RotateCandidates", "TouchWithoutFixing", "SprayAlerts",
           "RestartEverything", "KubeError", "LLMError"]


def __getattr__(name: str) -> Any:
    """Import an agent's module on first use (PEP 562), so that loading one agent (what the
    agent's process does) does not load the others."""
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
