"""Requests that fail leave nothing for the cycle collector: a marathon makes thousands of them
an hour, and every exception still holding the frame it was raised from (which holds the
exception) is a reference cycle that the collector has to find, traverse and free. The
collector then ran every few ticks and cost the default marathon about 3 % of its time."""

from __future__ import annotations

import gc
import types
from pathlib import Path

from test_cluster_behaviour import Shop

from pytest_sremarathon.runtime.code import ServiceError


def _cycle_garbage(shop: Shop, seconds: float) -> list[object]:
    """What the collector finds unreachable after ``seconds`` of the shop (saved, not freed)."""
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        shop.run(seconds)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_calls_failing_behind_a_caller_leave_no_exception_or_frame_cycles(tmp_path: Path) -> None:
    shop = Shop(tmp_path)
    try:
        # the catalog's Service is gone, and the frontend's handler does not catch the failed
        # lookup: each request fails two levels deep (the catalog's name, then the frontend's 500)
        shop.store.delete("Service", "shop", "productcatalog")
        shop.run(60)
        garbage = _cycle_garbage(shop, 180)
        assert shop.metric("frontend", "error_ratio") > 0.5  # (the requests did fail)
    finally:
        shop.close()
    leaked = [o for o in garbage if isinstance(o, (ServiceError, types.FrameType, types.TracebackType))]
    assert leaked == [], f"{len(leaked)} exceptions, frames and tracebacks freed only by the cycle collector"
