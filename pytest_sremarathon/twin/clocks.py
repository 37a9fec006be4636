"""Node clocks and the signed tokens services exchange.

Every call between two pods carries a short-lived signed token (a service-account JWT: issued
at the caller's ``now``, valid for :data:`TOKEN_LIFETIME`), which the callee checks against its
own clock with :data:`LEEWAY` of tolerance, as JWT libraries do. The twin's nodes share the
virtual clock unless a fault sets a node's skew (``Network.clock_skew``: node -> seconds its
clock is ahead, negative if behind); a call whose two clocks disagree by more than the
tolerance is refused with HTTP 401 and the library's words. Pods on the same node agree, so
only calls into or out of a skewed node fail.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

#: Clock skew tolerated by the token check, as the Kubernetes API server's service-account token
#: validation allows (``NowLeeway``, 60 s, k8s.io/kubernetes pkg/serviceaccount/claims.go).
LEEWAY = 60.0
#: The tokens' lifetime: short-lived service tokens, 5 minutes.
TOKEN_LIFETIME = 300.0


def token_rejection(skew: Mapping[str, float], caller_node: str, callee_node: str) -> Optional[str]:
    """Why the callee on ``callee_node`` refuses a token issued on ``caller_node`` (None: it
    accepts it)."""
    ahead = skew.get(caller_node, 0.0) - skew.get(callee_node, 0.0)  # the token's iat in the callee's future
    if ahead > LEEWAY:
        return "401 Unauthorized: token has invalid claims: token used before issued"
    if -ahead > TOKEN_LIFETIME + LEEWAY:
        return "401 Unauthorized: token has invalid claims: token is expired"
    return None
