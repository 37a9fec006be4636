"""A diagnosis: what failed, what kind of failure it is, and what it explains."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .incident import ServiceKey

#: The kinds of :attr:`Hypothesis.kind`, each with its repair: ``change`` (revert the suspect
#: change), ``node`` and ``zone`` (cordon and drain), ``zone-watch`` (localized only: a slow
#: or cut-off zone network), ``external`` (a third-party API: switch on a fallback),
#: ``credential`` (restart the clients of a datastore that rotated them), ``datastore``
#: (restart the slow datastore), ``surge`` (scale out).
KINDS = ("change", "node", "zone", "zone-watch", "external", "credential", "datastore", "surge")


@dataclass
class Hypothesis:
    component: str
    """``service:<app>/<svc>``, ``node:<n>``, ``zone:<z>`` or ``external:<name>``."""
    kind: str
    """One of :data:`KINDS`."""
    app: Optional[str]
    services: set[ServiceKey] = field(default_factory=set)
    """The failing services it explains."""
    nodes: list[str] = field(default_factory=list)
    fix_service: Optional[str] = None
    """The service whose configuration or pods the repair touches."""
    clients: list[str] = field(default_factory=list)
    """Services to restart (credential), that run hot (surge), or ``app/svc`` hosted (machines)."""
    tokens: set[str] = field(default_factory=set)
    """Evidence text, for change blame."""
    require: set[str] = field(default_factory=set)
    """A suspect change must contain one of these (a timeout's value)."""
    slow_burn: bool = False
    """Symptoms that take long to show (OOM, crash loops, unready pods): older changes count."""
    why: str = ""
