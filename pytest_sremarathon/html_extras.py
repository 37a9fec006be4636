"""pytest-html (an optional integration): what a segment's row of the HTML report links to.

Every segment links its run's sealed bundle; a marathon's last segment also links the run's
HTML report (``sremarathon report``, written next to the bundle) and shows its timeline
picture. Only when the ``html`` plugin is loaded; ``pytest_html`` is imported then.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import pytest

if TYPE_CHECKING:
    from .marathon import Marathon, RunResult
    from .session import MarathonTarget, SegmentResult

#: On a marathon's last segment item: (the run's HTML report, its timeline SVG), for the extras.
RUN_REPORT_KEY = pytest.StashKey["tuple[Optional[Path], str]"]()


def enabled(config: pytest.Config) -> bool:
    """Is pytest-html loaded (then segments make the pages and pictures it links)?"""
    return config.pluginmanager.getplugin("html") is not None


def run_report(result: Optional[RunResult], marathon: Marathon, target: MarathonTarget) -> tuple[Optional[Path], str]:
    """For pytest-html, on a marathon's last segment: the run's HTML report (``sremarathon
    report``, written next to the bundle) and its timeline picture as a standalone SVG (the
    page's ``#timeline`` with the page's styles); the schedule's timeline when the report
    cannot be made. Never fails the test."""
    page_path: Optional[Path] = None
    svg = ""
    if result is not None:
        try:
            from .report import write_report

            page_path = write_report(result.bundle, Path(str(result.bundle)[: -len(".tar.gz")] + ".html"))
            page = page_path.read_text(encoding="utf-8")
            found = re.search(r"<svg id=\"timeline\".*?</svg>", page, re.S)
            style = re.search(r"<style>(.*?)</style>", page, re.S)
            if found:
                svg = found.group(0)
                if style:
                    head, _, rest = svg.partition(">")
                    svg = f"{head}><style>{style.group(1)}</style>{rest}"
        except Exception:  # noqa: BLE001 - a report must never fail a test
            page_path = None
    if not svg:
        try:
            from .timeline import render_svg

            svg = render_svg(marathon.schedule.faults, marathon.start_time, marathon.end_time,
                             [(c.at, c.app) for c in marathon.schedule.benign], title=target.name)
        except Exception:  # noqa: BLE001
            svg = ""
    return page_path, svg


def add_extras(item: pytest.Item, report: Any, result: SegmentResult) -> None:
    """pytest-html, when installed: a link to the bundle on every segment and, on a marathon's
    last segment, a link to the run's HTML report and its timeline picture."""
    if not enabled(item.config):
        return
    try:
        from pytest_html import extras  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover
        return
    html_path = item.config.getoption("htmlpath", None)

    def link(path: Path) -> str:
        if not path.is_absolute():
            path = item.config.rootpath / path
        if html_path:
            return os.path.relpath(path, Path(html_path).resolve().parent)
        return path.as_uri()

    found = list(getattr(report, "extras", []))
    found.append(extras.url(link(Path(result.bundle)), name="bundle"))
    page, svg = item.stash.get(RUN_REPORT_KEY, (None, ""))
    if page is not None:
        found.append(extras.url(link(page), name="report"))
    if svg:
        found.append(extras.svg(base64.b64encode(svg.encode()).decode(), name="timeline"))
    report.extras = found
