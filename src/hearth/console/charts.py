"""Inline SVG charts, drawn on the server: no script, no library, nothing fetched.

A chart is a series of (label, value) points drawn as bars, with the maximum marked; labels are escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from markupsafe import Markup, escape

WIDTH: Final = 640
HEIGHT: Final = 140
PAD: Final = 24


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 1:
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{value:.4f}".rstrip("0").rstrip(".")


def bars(title: str, points: Sequence[tuple[str, float]], *, unit: str = "", colour: str = "#3b82f6") -> Markup:
    """A bar chart of ``points`` (oldest first); an empty series draws an empty frame that says so."""
    top = max((v for _, v in points), default=0.0)
    inner_w, inner_h = WIDTH - 2 * PAD, HEIGHT - 2 * PAD
    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
             f'<text x="{PAD}" y="14" class="chart-title">{escape(title)}</text>',
             f'<text x="{WIDTH - PAD}" y="14" text-anchor="end" class="chart-max">max {escape(_fmt(top))}'
             f'{escape(unit)}</text>',
             f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" class="chart-axis"/>']
    if not points:
        parts.append(f'<text x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle" class="chart-empty">no calls '
                     'in this window</text>')
    else:
        step = inner_w / len(points)
        for i, (label, value) in enumerate(points):
            h = 0.0 if top <= 0 else inner_h * value / top
            x, y = PAD + i * step, HEIGHT - PAD - h
            parts.append(f'<rect x="{x + step * 0.1:.1f}" y="{y:.1f}" width="{max(step * 0.8, 1):.1f}" '
                         f'height="{h:.1f}" fill="{colour}"><title>{escape(label)}: {escape(_fmt(value))}'
                         f'{escape(unit)}</title></rect>')
        parts.append(f'<text x="{PAD}" y="{HEIGHT - 6}" class="chart-label">{escape(points[0][0])}</text>')
        parts.append(f'<text x="{WIDTH - PAD}" y="{HEIGHT - 6}" text-anchor="end" class="chart-label">'
                     f'{escape(points[-1][0])}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
