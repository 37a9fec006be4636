"""dateparse — calendar dates as people and partner systems write them: ISO ``2026-04-09``,
``2026/04/09``, ``09.04.2026``, ``04/09/2026``. A day and month that could be either (both ≤ 12)
are read in the order ``dayfirst`` says.

Vendored (BSD licence; pure-Python build), pinned in requirements.txt: update both together.
"""

import re
from datetime import date

__version__ = "1.3.2"

DAYFIRST = False  # how an ambiguous day/month pair is read unless the caller says

_SEPARATORS = re.compile(r"[-/.]")


def parse_date(text, dayfirst=None):
    dayfirst = DAYFIRST if dayfirst is None else dayfirst
    parts = [int(p) for p in _SEPARATORS.split(str(text).strip())]
    if len(parts) != 3:
        raise ValueError(f"unknown date format: {text!r}")
    if parts[0] > 31:  # the year first
        year, a, b = parts
    else:
        a, b, year = parts
    if a > 12:
        day, month = a, b
    elif b > 12:
        month, day = a, b
    elif dayfirst:
        day, month = a, b
    else:
        month, day = a, b
    return date(year, month, day)
