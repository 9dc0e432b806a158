"""Inline SVG line charts, rendered on the server: no script library, no CDN."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from ndd_stream.view.html import Html, html, join, plain

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
               chart_id: str = "") -> Html:
    """One chart: a polyline per series over buckets ``start + i * step`` (UTC times).
    Text inside SVG ``<text>`` is written with ``plain`` (an HTML ``<bdi>`` has no place
    in SVG)."""
    left, right, top, bottom = 44, 8, 22, 22
    w, h = width - left - right, height - top - bottom
    n = max((len(v) for v in lines.values()), default=0)
    peak = nice_max(max((max(v, default=0) for v in lines.values()), default=0))
    out = [html('<svg class="chart" id="{}" viewBox="0 0 {} {}" width="{}" height="{}" '
                'role="img" aria-label="{}">', chart_id, width, height, width, height, title),
           html('<text x="{}" y="14" class="ct">{}</text>', left, plain(title))]
    for frac in (0.0, 0.5, 1.0):
        y = top + h - frac * h
        out.append(html('<line x1="{}" x2="{}" y1="{:.1f}" y2="{:.1f}" class="grid"/>',
                        left, left + w, y, y))
        value = peak * frac
        text = f"{value:.0f}" if value >= 10 or value == 0 else f"{value:.1f}"
        out.append(html('<text x="{}" y="{:.1f}" class="ax" text-anchor="end">{}</text>',
                        left - 4, y + 4, plain(text + (unit if frac == 1.0 else ""))))
    span = n * step
    if n:
        for frac, anchor in ((0.0, "start"), (0.5, "middle"), (1.0, "end")):
            t = start + frac * (n - 1) * step
            out.append(html('<text x="{:.1f}" y="{}" class="ax" text-anchor="{}">{}</text>',
                            left + frac * w, height - 6, anchor, plain(_label(t, span))))
    legend_x = float(left + w)
    for name, values in reversed(list(lines.items())):
        color = COLORS.get(name, "#333")
        if values:
            dx = w / max(1, n - 1)
            points = " ".join(f"{left + i * dx:.1f},{top + h - (v / peak) * h:.1f}"
                              for i, v in enumerate(values))
            out.append(html('<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}" '
                            'data-series="{}"/>', color, points, name))
        label = name.replace("_", " ")
        legend_x -= 8 + 6.5 * len(label)
        out.append(html('<text x="{:.0f}" y="14" class="lg" fill="{}">{}</text>', legend_x,
                        color, plain(label)))
    out.append(html("</svg>"))
    return join(out)
