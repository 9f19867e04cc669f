"""Step-line charts of values over time as inline SVG, drawn on the server: no script, no external asset.

Used by the data owner's ledger report (cumulative epsilon over time) and the coordinator's console
(every party's spent epsilon over time). A series is a list of (unix time, value) points; a step chart
holds each value until the next point, which is what a budget does between charges.
"""
from __future__ import annotations

import html
import math
import time
from collections.abc import Mapping, Sequence

__all__ = ["step_chart", "PALETTE"]

#: Colour-blind-safe qualitative colours (Okabe & Ito 2008), cycled over the series.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")


def _ticks(low: float, high: float, n: int = 5) -> list[float]:
    """About ``n`` round tick values covering [low, high] (steps of 1, 2 or 5 times a power of ten)."""
    span = max(high - low, 1e-12)
    raw = span / n
    mag = 10.0 ** math.floor(math.log10(raw))
    step = next((m * mag for m in (1, 2, 5, 10) if m * mag >= raw), raw)
    start = (low // step) * step
    return [start + i * step for i in range(int((high - start) / step) + 2) if start + i * step <= high + 1e-9 * span]


def _time_label(t: float, span: float) -> str:
    fmt = "%H:%M:%S" if span < 600 else "%H:%M" if span < 86400 else "%Y-%m-%d"
    return time.strftime(fmt, time.gmtime(t))


def step_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str, y_label: str,
               limits: Mapping[str, float] | None = None, width: int = 720, height: int = 320,
               now: float | None = None) -> str:
    """An SVG step chart: one line per series (held flat to ``now``), dashed lines at ``limits``, a legend.

    Times are shown in UTC. An empty chart still has its axes and says that nothing was recorded.
    """
    left, right, top, bottom = 64, 40, 28, 48
    legend_h = 18 * ((len(series) + 2) // 3)
    plot_w, plot_h = width - left - right, height - top - bottom
    points = [p for pts in series.values() for p in pts]
    now = max([p[0] for p in points], default=time.time()) if now is None else now
    t0 = min([p[0] for p in points], default=now - 60)
    t1 = max(now, t0)
    pad = max(t1 - t0, 60.0) * 0.04  # a little room before the first step and after the last
    t0, t1 = t0 - pad, t1 + pad
    vmax = max([p[1] for p in points] + list((limits or {}).values()) + [1e-9])
    vmax *= 1.05

    def x(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * plot_w

    def y(v: float) -> float:
        return top + plot_h - v / vmax * plot_h

    esc = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" viewBox="0 0 {width} {height + legend_h}" '
           f'width="{width}" height="{height + legend_h}" font-family="sans-serif" font-size="11">',
           f"<title>{esc(title)}</title>",
           f'<text x="{left}" y="16" font-size="13" font-weight="bold">{esc(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#999"/>']
    for v in _ticks(0.0, vmax / 1.05):
        out.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e3e3e3"/>'
                   f'<text x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.4g}</text>')
    for i in range(5):
        t = t0 + i * (t1 - t0) / 4
        out.append(f'<text x="{x(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
                   f"{_time_label(t, t1 - t0)}</text>")
    out.append(f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h + 34}" text-anchor="middle">time (UTC)</text>'
               f'<text x="14" y="{top + plot_h / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 14 {top + plot_h / 2:.0f})">{esc(y_label)}</text>')
    for k, (name, value) in enumerate(sorted((limits or {}).items())):
        colour = PALETTE[k % len(PALETTE)] if len(limits or {}) > 1 else "#c00"
        out.append(f'<line class="limit" x1="{left}" x2="{left + plot_w}" y1="{y(value):.1f}" y2="{y(value):.1f}" '
                   f'stroke="{colour}" stroke-dasharray="6 4"><title>{esc(name)}: {value:.6g}</title></line>')
    if not points:
        out.append(f'<text x="{left + plot_w / 2:.0f}" y="{top + plot_h / 2:.0f}" text-anchor="middle" '
                   'fill="#666">nothing recorded yet</text>')
    for k, (name, pts) in enumerate(series.items()):
        colour = PALETTE[k % len(PALETTE)]
        path, last = [], 0.0
        for t, v in sorted(pts):
            path.append(f"{x(t):.1f},{y(last):.1f} {x(t):.1f},{y(v):.1f}")
            last = v
        if pts:
            path.append(f"{x(t1):.1f},{y(last):.1f}")
            out.append(f'<polyline class="series" data-name="{esc(name)}" fill="none" stroke="{colour}" '
                       f'stroke-width="2" points="{" ".join(path)}"><title>{esc(name)}</title></polyline>')
        lx, ly = left + (k % 3) * (plot_w // 3), height + 18 * (k // 3) + 4
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{colour}"/>'
                   f'<text x="{lx + 16}" y="{ly + 10}">{esc(name)}</text>')
    out.append("</svg>")
    return "\n".join(out)
