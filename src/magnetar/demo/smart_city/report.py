"""The job's HTML report: one self-contained page (no script, no file beside it) with the summary,
a histogram of the alert receipts' latency, and a picture of the alerts each area raised, the
damaged areas apart from the clean ones (which must have none).

Written after the summary to ``--report`` or, by default, ``smart-city-report.html`` in the work
directory when that is kept (``--work-dir``, ``--keep-work-dir``), else in the system's temporary
directory (the work directory is removed); the job prints where.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Sequence
from html import escape
from pathlib import Path

from magnetar.demo.smart_city.settings import CitySettings
from magnetar.demo.smart_city.summary import Summary

NAME = "smart-city-report.html"
BINS = 20
DAMAGED, CLEAN, BAR = "#D55E00", "#009E73", "#0072B2"


def report_path(settings: CitySettings) -> Path:
    """Where the report goes (see the module's docstring)."""
    if settings.report:
        return Path(settings.report)
    kept = settings.work_path()
    if kept is not None:
        return kept / NAME
    return Path(tempfile.gettempdir()) / NAME


def histogram(values: Sequence[float], bins: int = BINS) -> list[tuple[float, float, int]]:
    """(from, to, count) of ``bins`` equal bins over [0, the largest value]."""
    if not values:
        return []
    top = max(values)
    width = top / bins if top > 0 else 1.0
    counts = [0] * bins
    for value in values:
        counts[min(bins - 1, int(value / width))] += 1
    return [(i * width, (i + 1) * width, n) for i, n in enumerate(counts)]


def _ms(value: float) -> str:
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value:.0f} ms"


def latency_svg(values: Sequence[float]) -> str:
    """The histogram as an SVG: one bar per bin, the count on the y axis."""
    bins = histogram(values)
    if not bins:
        return '<p class="muted">No alert receipts: no latency to show.</p>'
    width, height, left, bottom, top_pad = 640, 260, 48, 40, 20
    plot_w, plot_h = width - left - 12, height - bottom - top_pad
    most = max(n for _, _, n in bins) or 1
    step = plot_w / len(bins)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" role="img" aria-label="latency histogram">',
        f'<text x="{left - 6}" y="{top_pad + 4}" text-anchor="end" class="tick">{most}</text>',
        f'<text x="{left - 6}" y="{top_pad + plot_h}" text-anchor="end" class="tick">0</text>',
        f'<line x1="{left}" y1="{top_pad + plot_h}" x2="{left + plot_w}" y2="{top_pad + plot_h}"'
        ' class="axis"/>',
    ]
    for i, (low, high, count) in enumerate(bins):
        h = plot_h * count / most
        parts.append(
            f'<rect x="{left + i * step + 1:.1f}" y="{top_pad + plot_h - h:.1f}" width="{step - 2:.1f}"'
            f' height="{h:.1f}" fill="{BAR}"><title>{_ms(low)} to {_ms(high)}: {count}</title></rect>'
        )
    for i in (0, len(bins) // 2, len(bins)):
        at = bins[i][0] if i < len(bins) else bins[-1][1]
        parts.append(
            f'<text x="{left + i * step:.1f}" y="{top_pad + plot_h + 16}" text-anchor="middle"'
            f' class="tick">{_ms(at)}</text>'
        )
    parts.append(
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" text-anchor="middle" class="tick">'
        "from the event's time to the vehicle's receipt</text></svg>"
    )
    return "\n".join(parts)


def areas_svg(areas: Sequence[str], alerts: dict[str, int], damaged: Sequence[str]) -> str:
    """One horizontal bar per area: the alerts it raised, damaged areas in one colour, clean in another."""
    row, left, width = 26, 150, 640
    height = row * len(areas) + 30
    most = max([*alerts.values(), 1])
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}"'
        f' height="{height}" role="img" aria-label="alerts by area">'
    ]
    for i, area in enumerate(areas):
        count = alerts.get(area, 0)
        y = 10 + i * row
        colour = DAMAGED if area in damaged else CLEAN
        bar = (width - left - 60) * count / most
        state = "damaged" if area in damaged else "clean"
        parts.append(
            f'<text x="{left - 8}" y="{y + 15}" text-anchor="end" class="label">{escape(area)}</text>'
        )
        parts.append(
            f'<rect x="{left}" y="{y + 3}" width="{max(bar, 2):.1f}" height="{row - 8}" fill="{colour}">'
            f"<title>{escape(area)} ({state}): {count} alerts</title></rect>"
        )
        parts.append(
            f'<text x="{left + max(bar, 2) + 6:.1f}" y="{y + 15}" class="tick">{count} ({state})</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #1d2430; max-width: 60rem; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
.ok { color: #1f8a4c; } .bad { color: #c8372d; } .muted { color: #687385; }
pre { background: #f6f7f9; padding: 1rem; overflow-x: auto; font-size: 12px; }
svg text.tick { font-size: 11px; fill: #444; } svg text.label { font-size: 12px; fill: #222; }
svg .axis { stroke: #444; }
table { border-collapse: collapse; }
td, th { padding: 0.2rem 0.8rem; text-align: left; border-bottom: 1px solid #ddd; }
"""


def render_html(summary: Summary, latencies_ms: Sequence[float]) -> str:
    verdict = ("ok", "OK: every check passed") if summary.ok else ("bad", "FAILED: see the summary")
    latency = summary.latency
    rows = "".join(
        f"<tr><th>{escape(name)}</th><td>{escape(line)}</td></tr>"
        for name, line in (
            ("alert receipts", latency.line()),
            ("pipeline", summary.pipeline_latency.line()),
            ("broadcast", summary.broadcast_latency.line()),
        )
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Smart city report</title><style>{STYLE}</style></head>
<body>
<h1>Smart city report</h1>
<p class="{verdict[0]}"><strong>{verdict[1]}</strong>: {len(summary.areas)} areas
({len(summary.damaged_areas)} damaged), {summary.vehicles} vehicles, {summary.events_in:,} events,
{summary.alerts_out} alerts,
{summary.receipts} of {summary.expected_receipts} receipts, {summary.wall_s:.0f} s.</p>
<h2>Alerts by area</h2>
<p class="muted">Damaged areas must raise alerts; clean areas none.</p>
{areas_svg(summary.areas, summary.alerts_by_area, summary.damaged_areas)}
<h2>Latency of the alert receipts</h2>
<table>{rows}</table>
{latency_svg(latencies_ms)}
<h2>Summary</h2>
<pre>{escape(summary.render().strip())}</pre>
</body></html>
"""


def write_report(summary: Summary, path: Path) -> Path:
    """The report of ``summary`` at ``path`` (its folder made); the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(summary, [v for v in summary.latency_samples_ms if math.isfinite(v)]))
    return path
