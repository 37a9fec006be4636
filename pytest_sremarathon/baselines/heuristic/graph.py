"""The call graph HeuristicSRE infers: who calls whom, per app.

Nothing tells the agent the graph; it learns edges from what the cluster offers: error log
lines naming a failing callee, the ``*_ADDR``-style settings of the services' ConfigMaps, and
``ctx.call("…")`` in change diffs. Edges are only ever added.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional


class CallGraph:
    """Per app, each caller's callees (sorted)."""

    def __init__(self, edges: Optional[dict[str, dict[str, list[str]]]] = None) -> None:
        self.edges: dict[str, dict[str, list[str]]] = edges if edges is not None else {}

    def add(self, app: str, caller: str, callee: str) -> None:
        if caller == callee:
            return
        callees = self.edges.setdefault(app, {}).setdefault(caller, [])
        if callee not in callees:
            callees.append(callee)
            callees.sort()

    def callees(self, app: str, svc: str) -> list[str]:
        return list(self.edges.get(app, {}).get(svc, []))

    def callers(self, app: str, svc: str) -> list[str]:
        return sorted(c for c, cs in self.edges.get(app, {}).items() if svc in cs)

    def transitive_callers(self, app: str, svc: str) -> set[str]:
        """Everything upstream of ``svc``: its callers, their callers, …"""
        out: set[str] = set()
        todo = [svc]
        while todo:
            for c in self.callers(app, todo.pop()):
                if c not in out:
                    out.add(c)
                    todo.append(c)
        return out

    def called(self, app: str) -> set[str]:
        """The services of ``app`` something calls."""
        return {c for cs in self.edges.get(app, {}).values() for c in cs}

    def services(self, app: str) -> set[str]:
        """Every service of ``app`` the graph names, as a caller or a callee."""
        edges = self.edges.get(app, {})
        return set(edges) | {c for cs in edges.values() for c in cs}

    def learn_config(self, app: str, configmaps: Iterable[dict[str, Any]], owners: dict[str, str],
                     names: set[str]) -> None:
        """``<X>_ADDR: <service>`` (or ``_HOST``, ``_URL``, ``_SERVICE``) in a ConfigMap is an
        edge from the deployment using it (``owners``: ConfigMap name -> deployment) to a
        service of the app (``names``)."""
        for cm in configmaps:
            owner = owners.get(cm["metadata"]["name"])
            if owner is None:
                continue
            for key, value in (cm.get("data") or {}).items():
                target = str(value).split(":")[0].split(".")[0]
                if key.upper().endswith(("_ADDR", "_HOST", "_URL", "_SERVICE")) and target in names:
                    self.add(app, owner, target)

    def to_json(self) -> dict[str, dict[str, list[str]]]:
        return self.edges
