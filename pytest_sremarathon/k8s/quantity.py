"""Kubernetes resource quantities ("500m", "256Mi", "1.5") as plain numbers."""

from __future__ import annotations

import functools

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


# Parsed once per distinct quantity: the kubelet and the alert rules read every pod's limits
# every tick. (typed: 1 and 1.0 and "1" stay distinct keys.)
@functools.lru_cache(maxsize=1024, typed=True)
def cpu_millicores(q: str | int | float | None, default: int = 0) -> int:
    if q is None:
        return default
    s = str(q)
    if s.endswith("m"):
        return int(float(s[:-1]))
    return int(round(float(s) * 1000))


@functools.lru_cache(maxsize=1024, typed=True)
def memory_bytes(q: str | int | float | None, default: int = 0) -> int:
    if q is None:
        return default
    s = str(q)
    for suffix, mult in _BINARY.items():
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * mult)
    for suffix, mult in _DECIMAL.items():
        if s.endswith(suffix):
            return int(float(s[: -len(suffix)]) * mult)
    return int(float(s))


def format_memory(n: int) -> str:
    return f"{n // 2**20}Mi" if n % 2**20 == 0 else f"{n // 2**10}Ki"
