"""API credentials a pod presents to a third-party API, and the provider's check of their expiry.

A pod that holds a credential for an external API has it in its environment as
``<EXTERNAL>_CREDENTIAL`` (the external's name upper-cased, ``-`` as ``_``): a JSON document
with ``key_id`` and ``expires_at`` (RFC 3339), as secrets managers and provider dashboards
issue them. The twin's provider refuses a credential past its ``expires_at`` with HTTP 401 and
the words a card processor's API uses (Stripe's ``api_key_expired``). A pod reads its
environment when it starts, so a renewed Secret reaches it only when it restarts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Optional


def credential_env(external: str) -> str:
    """The environment variable holding a pod's credential for ``external``."""
    return external.upper().replace("-", "_") + "_CREDENTIAL"


@functools.lru_cache(maxsize=64)
def read_credential(text: str) -> tuple[str, Optional[datetime]]:
    """A credential's key id and expiry (None: it never expires, or cannot be read)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return "", None
    if not isinstance(doc, dict):
        return "", None
    try:
        expires = datetime.fromisoformat(str(doc.get("expires_at") or "").replace("Z", "+00:00"))
    except ValueError:
        return str(doc.get("key_id") or ""), None
    return str(doc.get("key_id") or ""), expires if expires.tzinfo else expires.replace(tzinfo=timezone.utc)


def refusal(config: Mapping[str, str], external: str, now: datetime) -> Optional[str]:
    """Why the provider of ``external`` refuses the credential this configuration holds (None:
    it holds none, or a valid one)."""
    text = config.get(credential_env(external))
    if text is None:
        return None
    key_id, expires = read_credential(text)
    if expires is None or now < expires:
        return None
    shown = f"{key_id[:8]}{'*' * 8}{key_id[-4:]}" if len(key_id) > 12 else key_id
    return (f"401 Unauthorized: api_key_expired: Expired API Key provided: {shown} "
            f"(expired {expires.strftime('%Y-%m-%dT%H:%M:%SZ')})")
