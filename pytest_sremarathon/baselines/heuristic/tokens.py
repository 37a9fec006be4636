"""Words of evidence: the tokens error text and change diffs are compared by."""

from __future__ import annotations

import re

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}|\d+(?:\.\d+)?")
# Words every log line and diff is full of: no evidence for or against a change.
_STOP = frozenset("""
return self else elif none true false from import with while class lambda yield pass break continue
print format item items value values data request response result error errors config ctx req call
calls work service services string number float len list dict https http json message this that
true false info warning level append update users user name names","" get set put post the and for
""".split())


def tokens(text: str, numbers: bool = False) -> set[str]:
    """Lower-cased identifiers of four characters or more (and the parts of snake_case ones),
    numbers too if asked, minus the stop words."""
    out = set()
    for tok in _TOKEN.findall(text):
        low = tok.lower()
        if low in _STOP or (not numbers and low[0].isdigit()):
            continue
        out.add(low)
        if "_" in low:
            out.update(p for p in low.split("_") if len(p) >= 4 and p not in _STOP)
    return out


def diff_tokens(diff: str) -> set[str]:
    """The tokens of a unified diff's added and removed lines, numbers included (a changed
    timeout shows as its value)."""
    lines = [ln[1:] for ln in diff.splitlines()
             if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    return tokens("\n".join(lines), numbers=True)
