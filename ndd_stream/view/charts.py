"""Inline SVG line charts, rendered on the server: no script library, no CDN."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from html import escape

COLORS = {"in": "#555", "out": "#1f77b4", "unique": "#2ca02c", "near_duplicate": "#e69f00",
          "exact_duplicate": "#cc79a7", "dlq": "#d62728", "lag": "#7f3fbf"}


def nice_max(value: float) -> float:
    """The smallest 1/2/5 x 10^n at or above ``value`` (axis top)."""
    if value <= 0:
        return 1.0
    exp = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5, 10):
        if step * exp >= value:
            return float(step * exp)
    return float(10 * exp)


def _label(t: float, span: float) -> str:
    fmt = "%H:%M:%S" if span <= 900 else "%H:%M"
    return datetime.fromtimestamp(t, tz=UTC).strftime(fmt)


def line_chart(title: str, start: float, step: float, lines: Mapping[str, Sequence[float]],
               *, unit: str = "/s", width: int = 560, height: int = 180,
               chart_id: str = "") -> str:
    """One chart: a polyline per series over buckets ``start + i * step`` (UTC times)."""
    left, right, top, bottom = 44, 8, 22, 22
    w, h = width - left - right, height - top - bottom
    n = max((len(v) for v in lines.values()), default=0)
    peak = nice_max(max((max(v, default=0) for v in lines.values()), default=0))
    out = [f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{left}" y="14" class="ct">{escape(title)}</text>']
    for frac in (0.0, 0.5, 1.0):
        y = top + h - frac * h
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>')
        value = peak * frac
        text = f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.1f}"
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" class="ax" text-anchor="end">'
                   f'{text}{escape(unit) if frac == 1.0 else ""}</text>')
    span = n * step
    if n:
        for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
            t = start + frac * (n - 1) * step
            out.append(f'<text x="{left + frac * w:.1f}" y="{height - 6}" class="ax" '
                       f'text-anchor="{anchor}">{_label(t, span)}</text>')
    legend_x = float(left + w)
    for name, values in reversed(list(lines.items())):
        color = COLORS.get(name, "#333")
        if values:
            dx = w / max(1, n - 1)
            points = " ".join(f"{left + i * dx:.1f},{top + h - (v / peak) * h:.1f}"
                              for i, v in enumerate(values))
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" '
                       f'points="{points}" data-series="{escape(name)}"/>')
        label = name.replace("_", " ")
        legend_x -= 8 + 6.5 * len(label)
        out.append(f'<text x="{legend_x:.0f}" y="14" class="lg" fill="{color}">'
                   f'{escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)
