"""A small SVG writer for the benchmarks' pictures: grouped bars (with a min-max whisker) and lines
over a numeric axis, linear or logarithmic, with a title, axis labels and a legend.

Our own code rather than matplotlib: the figures are a few bars and lines, matplotlib would bring
numpy, fonts and ~50 MB into the bench extra for them, and its SVGs change byte for byte between
versions (ids, paths), while these are plain text that a diff of docs/ can read. Every value is
escaped; the output depends only on the input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

#: Series colours (colour-blind safe: Okabe and Ito's palette).
COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
WIDTH, HEIGHT = 640, 380
LEFT, RIGHT, TOP, BOTTOM = 72, 16, 40, 84


@dataclass
class Bar:
    """One bar: its value and, if known, the range of the runs behind it."""

    value: float
    low: float | None = None
    high: float | None = None


@dataclass
class Chart:
    title: str
    y_label: str
    x_label: str = ""
    log_y: bool = False
    log_x: bool = False
    parts: list[str] = field(default_factory=list)


def _fmt(value: float) -> str:
    """A tick label: 1.5k, 20M, 0.25."""
    magnitude = abs(value)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= limit:
            return f"{value / limit:.3g}{suffix}"
    return f"{value:.3g}"


def nice_ticks(low: float, high: float, log: bool) -> list[float]:
    """Tick values covering [low, high]: powers of ten on a log axis, 1/2/5 steps on a linear one."""
    if log:
        low = max(low, 1e-9)
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(max(high, low * 10)))
        return [10.0**e for e in range(first, last + 1)]
    if high <= low:
        high = low + 1
    raw = (high - low) / 5
    power = 10 ** math.floor(math.log10(raw))
    step = next(s * power for s in (1, 2, 5, 10) if s * power >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value < high + step * 0.999:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _scale(ticks: Sequence[float], log: bool, pixels: float, flip: bool):
    low, high = ticks[0], ticks[-1]

    def place(value: float) -> float:
        if log:
            value = max(value, low)
            share = (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low) or 1)
        else:
            share = (value - low) / ((high - low) or 1)
        return pixels * (1 - share) if flip else pixels * share

    return place


def _frame(chart: Chart, ticks: Sequence[float], y) -> list[str]:
    plot_w = WIDTH - LEFT - RIGHT
    out = [
        f'<text x="{LEFT}" y="22" class="title">{escape(chart.title)}</text>',
        f'<text transform="translate(16,{TOP + (HEIGHT - TOP - BOTTOM) / 2:.0f}) rotate(-90)"'
        f' text-anchor="middle" class="label">{escape(chart.y_label)}</text>',
    ]
    for tick in ticks:
        at = TOP + y(tick)
        out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{at:.1f}" y2="{at:.1f}" class="grid"/>')
        out.append(
            f'<text x="{LEFT - 6}" y="{at + 4:.1f}" text-anchor="end" class="tick">{_fmt(tick)}</text>'
        )
    if chart.x_label:
        out.append(
            f'<text x="{LEFT + plot_w / 2:.0f}" y="{HEIGHT - 6}" text-anchor="middle" class="label">'
            f"{escape(chart.x_label)}</text>"
        )
    return out


def _legend(names: Sequence[str]) -> list[str]:
    """Swatches and names under the plot, in rows that fit the width."""
    out, x, y = [], LEFT, HEIGHT - BOTTOM + 24
    for i, name in enumerate(names):
        width = 24 + 7 * len(name)
        if x + width > WIDTH - RIGHT and x > LEFT:
            x, y = LEFT, y + 15
        colour = COLOURS[i % len(COLOURS)]
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{x + 14}" y="{y + 9}" class="tick">{escape(name)}</text>')
        x += width
    return out


def _document(parts: list[str]) -> str:
    style = (
        "text{font-family:sans-serif;fill:#222}.title{font-size:14px;font-weight:bold}"
        ".label{font-size:12px}.tick{font-size:11px}.grid{stroke:#ddd;stroke-width:1}"
        ".axis{stroke:#444;stroke-width:1}.whisker{stroke:#222;stroke-width:1}"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}"'
        f' height="{HEIGHT}" role="img">\n<style>{style}</style>\n'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fff"/>\n' + "\n".join(parts) + "\n</svg>\n"
    )


def bars(chart: Chart, groups: Sequence[str], series: dict[str, Sequence[Bar | None]]) -> str:
    """Grouped bars: one group per ``groups`` item, one bar per series in each (None: no bar)."""
    values = [b for bs in series.values() for b in bs if b is not None]
    top = max((b.high if b.high is not None else b.value) for b in values) if values else 1.0
    bottom = min(b.value for b in values) if values and chart.log_y else 0.0
    ticks = nice_ticks(bottom if chart.log_y else 0.0, top, chart.log_y)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    y = _scale(ticks, chart.log_y, plot_h, flip=True)
    parts = _frame(chart, ticks, y)
    group_w = plot_w / max(1, len(groups))
    bar_w = group_w * 0.8 / max(1, len(series))
    for g, group in enumerate(groups):
        x0 = LEFT + g * group_w + group_w * 0.1
        parts.append(
            f'<text x="{LEFT + (g + 0.5) * group_w:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle"'
            f' class="tick">{escape(group)}</text>'
        )
        for s, (name, bs) in enumerate(series.items()):
            bar = bs[g] if g < len(bs) else None
            if bar is None:
                continue
            x = x0 + s * bar_w
            top_y = TOP + y(bar.value)
            colour = COLOURS[s % len(COLOURS)]
            parts.append(
                f'<rect x="{x:.1f}" y="{top_y:.1f}" width="{bar_w * 0.92:.1f}"'
                f' height="{TOP + plot_h - top_y:.1f}" fill="{colour}"><title>{escape(name)} {escape(group)}:'
                f" {_fmt(bar.value)}</title></rect>"
            )
            if bar.low is not None and bar.high is not None:
                mid = x + bar_w * 0.46
                lo, hi = TOP + y(bar.low), TOP + y(bar.high)
                parts.append(
                    f'<line x1="{mid:.1f}" x2="{mid:.1f}" y1="{lo:.1f}" y2="{hi:.1f}" class="whisker"/>'
                )
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" class="axis"/>')
    parts += _legend(list(series))
    return _document(parts)


def lines(chart: Chart, series: dict[str, Sequence[tuple[float, float]]]) -> str:
    """Lines through (x, y) points, one per series, with a marker at each point."""
    points = [p for ps in series.values() for p in ps]
    xs, ys = [p[0] for p in points] or [0.0, 1.0], [p[1] for p in points] or [0.0, 1.0]
    x_ticks = (
        nice_ticks(min(xs), max(xs), chart.log_x)
        if chart.log_x
        else nice_ticks(min(0.0, min(xs)), max(xs), False)
    )
    if not chart.log_x and all(float(v).is_integer() for v in xs):  # counts: whole ticks only
        x_ticks = [t for t in x_ticks if float(t).is_integer()]
    y_ticks = nice_ticks(min(ys) if chart.log_y else 0.0, max(ys), chart.log_y)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    x = _scale(x_ticks, chart.log_x, plot_w, flip=False)
    y = _scale(y_ticks, chart.log_y, plot_h, flip=True)
    parts = _frame(chart, y_ticks, y)
    for tick in x_ticks:
        parts.append(
            f'<text x="{LEFT + x(tick):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle" class="tick">'
            f"{_fmt(tick)}</text>"
        )
    for s, (name, ps) in enumerate(series.items()):
        colour = COLOURS[s % len(COLOURS)]
        at = [(LEFT + x(px), TOP + y(py)) for px, py in sorted(ps)]
        if len(at) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in at)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        for (px, py), (vx, vy) in zip(at, sorted(ps), strict=True):
            parts.append(
                f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{colour}"><title>{escape(name)}:'
                f" {_fmt(vx)}, {_fmt(vy)}</title></circle>"
            )
    parts.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" class="axis"/>')
    parts.append(
        f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" class="axis"/>'
    )
    parts += _legend(list(series))
    return _document(parts)


def write(path: Path, svg: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg)
    return path
