"""Change blame: which pipeline changes may have caused a service fault, best first."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import NamedTuple

from pytest_sremarathon.agent.protocol import Change

from ..times import utc
from .context import StepContext
from .hypothesis import Hypothesis
from .incident import Incident
from .tokens import diff_tokens

_CALL = re.compile(r"""ctx\.call\(\s*["']([\w.-]+)["']""")


class Suspect(NamedTuple):
    score: float
    change: Change
    why: str
    """The case against it, in words (``… its diff matches the errors (…)`` with evidence)."""
    strong: bool
    """Strong suspects are reverted at once; weak ones only with evidence, after a wait."""


def suspects(ctx: StepContext, inc: Incident, h: Hypothesis, view_services: dict[str, list[str]]) -> list[Suspect]:
    """Changes that may have caused a service fault, best first.

    A change is a suspect if it shipped before the symptoms began and not too long before.
    Its score grows with how close it is to the failing service (the service itself, a
    callee — a changed contract —, a caller — a retry storm —, app-wide), how recent it is,
    and how many of its diff's *distinctive* tokens (rare among the app's changes) appear
    in the failing service's errors. ``strong`` suspects are acted on at once. Calls that
    diffs add (``ctx.call("…")``) are learnt as call edges on the way."""
    obs, state, graph = ctx.obs, ctx.state, ctx.state.graph
    app, root = h.app or "", h.fix_service or ""
    onset = inc.opened
    if inc.onset is not None:
        onset = min(onset, inc.onset)
    if inc.tried:  # the first suspect was not it: whatever shipped since is a suspect too
        onset = obs.time
    callees, callers = set(graph.callees(app, root)), set(graph.callers(app, root))
    changes = ctx.app_changes(app)
    names = {n.lower() for n in graph.services(app) | set(view_services.get(app, []))}
    evidence_tokens = (h.tokens - names) | h.require
    diffs = {ch.id: diff_tokens(ch.diff) for ch in changes}
    df: dict[str, int] = {}
    for toks in diffs.values():
        for t in toks:
            df[t] = df.get(t, 0) + 1
    common = max(3, len(changes) // 5)
    out = []
    for ch in changes:
        if ch.id in state.reverted or ch.id in inc.tried or "sre-agent" in ch.author:
            continue
        if ch.message.startswith('Revert "'):
            continue
        shipped = utc(ch.time)
        if shipped > onset + timedelta(minutes=1) or onset - shipped > ctx.tuning.change_horizon:
            continue
        age = max((onset - shipped).total_seconds() / 60, 0.0)
        for callee in _CALL.findall(ch.diff):
            if ch.service:
                graph.add(app, ch.service, callee)
        if ch.service == root:
            rel, how = 3.0, "the failing service"
        elif ch.service in callees:
            rel, how = 1.6, "a service it calls"
        elif ch.service in callers:
            rel, how = 1.3, "a service that calls it"
        elif ch.service is None:
            rel, how = 1.0, "app-wide"
        else:
            rel, how = 0.25, "another service"
        distinctive = {tok for tok in diffs[ch.id] if df.get(tok, 0) <= common}
        if root and root.lower() in distinctive and ch.service != root:
            rel = max(rel, 1.5)
        if h.require and not (diffs[ch.id] & h.require):
            continue
        matched = sorted(distinctive & evidence_tokens | (diffs[ch.id] & h.require))
        evidence = min(len(matched), 4)
        score = rel * (1 + evidence) / (1 + age / 30)
        strong = (rel >= 3 and (age <= 20 or (h.slow_burn and age <= 120))) or (evidence >= 2 and rel >= 1) \
            or (evidence >= 1 and rel >= 3)
        if rel >= 1.0 or evidence >= 2:
            why = f"{ch.kind} change to {how}, {age:.0f} min before the symptoms"
            if matched:
                why += f"; its diff matches the errors ({', '.join(matched[:4])})"
            out.append(Suspect(score, ch, why, strong))
    out.sort(key=lambda x: (-x.score, x.change.id))
    return out
