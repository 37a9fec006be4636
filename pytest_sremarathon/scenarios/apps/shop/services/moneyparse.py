"""moneyparse — exact money amounts from the numbers and strings services pass around.

Vendored (MIT licence; pure-Python build), pinned in requirements.txt: update both together.
"""

from decimal import ROUND_HALF_UP, Decimal

__version__ = "1.4.2"


def to_amount(value, places=2, allow_float=True):
    """``value`` (int, str, Decimal or, with ``allow_float``, float) as a Decimal rounded half-up
    to ``places`` decimals."""
    if isinstance(value, float):
        if not allow_float:
            raise TypeError(f"moneyparse refuses float amount {value!r} (floats are lossy): pass a str or "
                            "Decimal, or allow_float=True")
        value = repr(value)
    return Decimal(value).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
