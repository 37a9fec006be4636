"""HeuristicSRE, one concept per module.

``agent`` runs the step: ``cluster`` looks, ``health`` verifies the alerts against telemetry,
``logs`` reads the failing services' logs (``graph`` keeps the call graph learnt from them),
``diagnosis`` and ``machines`` localize (``hypothesis``), ``tracking`` turns hypotheses into
incidents (``incident``) and assigns alerts, ``repairs`` acts (``suspects`` blames changes),
``report`` claims, closes and reports. ``state`` is what the journal keeps, ``tuning`` the
thresholds, ``context`` what one step shares.
"""

from __future__ import annotations

from .agent import HeuristicSRE

__all__ = ["HeuristicSRE"]
