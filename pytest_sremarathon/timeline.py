"""A schedule as a picture: one SVG with a lane per app (and one for the cluster), fault
windows as bars, overlaps visible where bars stack, benign deploys as ticks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from .faults.base import Fault

FAMILY_COLOURS = {"change": "#d9534f", "dependency": "#f0ad4e", "infrastructure": "#5b6abf", "load": "#5cb85c"}
ROW, BAR, LEFT, WIDTH = 16, 12, 110, 1000


def _stack(faults: Sequence[Fault]) -> dict[str, int]:
    """Greedy row per fault so that overlapping windows of one lane sit on different rows."""
    rows: dict[str, int] = {}
    ends: list[datetime] = []
    for f in sorted(faults, key=lambda f: (f.start, f.id)):
        for i, end in enumerate(ends):
            if end <= f.start:
                ends[i] = f.end
                rows[f.id] = i
                break
        else:
            rows[f.id] = len(ends)
            ends.append(f.end)
    return rows


def render_svg(faults: Sequence[Fault], start: datetime, end: datetime,
               benign: Sequence[tuple[datetime, str]] = (), title: str = "") -> str:
    span = max(1.0, (end - start).total_seconds())

    def x(t: datetime) -> float:
        return LEFT + (t - start).total_seconds() / span * WIDTH

    lanes = sorted({f.app for f in faults} | {app for _, app in benign})
    parts: list[str] = []
    y = 30
    for lane in lanes:
        lane_faults = [f for f in faults if f.app == lane]
        rows = _stack(lane_faults)
        height = (max(rows.values(), default=0) + 1) * ROW + 10
        parts.append(f'<text x="4" y="{y + 12}" font-size="12" font-weight="bold">{escape(lane)}</text>')
        parts.append(f'<line x1="{LEFT}" x2="{LEFT + WIDTH}" y1="{y + height - 4}" y2="{y + height - 4}" stroke="#ddd"/>')
        for t, app in benign:
            if app == lane:
                parts.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{y}" y2="{y + height - 6}" stroke="#aaa" '
                             f'stroke-dasharray="2,2"><title>benign deploy {t:%H:%M}</title></line>')
        for f in lane_faults:
            top = y + rows[f.id] * ROW
            colour = FAMILY_COLOURS.get(f.family, "#777")
            label = f"{f.id} {f.kind} {f.start:%H:%M}–{f.end:%H:%M}"
            parts.append(f'<rect x="{x(f.start):.1f}" y="{top}" width="{max(2.0, x(f.end) - x(f.start)):.1f}" '
                         f'height="{BAR}" rx="2" fill="{colour}" fill-opacity="0.75"><title>{escape(label)}</title></rect>')
            parts.append(f'<text x="{x(f.start) + 2:.1f}" y="{top + 10}" font-size="9" fill="#fff">{escape(f.id)}</text>')
        y += height
    hours = int(span // 3600)
    for h in range(hours + 1):
        px = LEFT + h * 3600 / span * WIDTH
        parts.append(f'<line x1="{px:.1f}" x2="{px:.1f}" y1="24" y2="{y}" stroke="#eee"/>')
        parts.append(f'<text x="{px:.1f}" y="{y + 14}" font-size="10" text-anchor="middle">{h}h</text>')
    legend = " ".join(f'<tspan fill="{c}">■ {k}</tspan>' for k, c in FAMILY_COLOURS.items())
    head = f'<text x="4" y="16" font-size="13">{escape(title)}  {legend}</text>'
    total_h = y + 24
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + WIDTH + 20}" height="{total_h}" '
            f'font-family="sans-serif">{head}{"".join(parts)}</svg>')
