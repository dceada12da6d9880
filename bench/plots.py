"""The benchmarks' pictures (bench/svg.py), made by the tools beside their tables and, for the
figures already recorded, again from docs/ without running anything:

    .venv/bin/python -m bench.plots          # docs/benchmarks/*.svg from docs/benchmarks.json and .md

- ``throughput.svg`` and ``latency.svg``: the main benchmark's produce rates by scenario and its
  1 KB sync-send latency percentiles, per broker (from its JSON document; ``bench.report`` writes
  them with each run);
- ``workers.svg``: throughput against workers (``bench.workers`` writes it with ``--plot``; here
  from the table of docs/benchmarks.md's Workers section);
- ``broadcast-fanout.svg``: a broadcast message's delivery time to every consumer against the
  number of consumers (the lean generator's table in the Broadcast at 10K-100K section);
- ``broadcast-latency.svg``: ``bench.broadcast``'s latency distribution per way of fanning out
  (written with ``--plot``; here from the 1,000-consumer table).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from bench.svg import Bar, Chart, bars, lines, write

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
FOLDER = "benchmarks"  # beside benchmarks.md: docs/benchmarks/*.svg

#: The main benchmark's latency percentiles, as its summary names them.
PERCENTILES = (("latency_p50_us", "p50"), ("latency_p99_us", "p99"), ("latency_p999_us", "p99.9"))


def _bar(figure: dict | None, scale: float = 1.0) -> Bar | None:
    if not figure:
        return None
    return Bar(figure["median"] * scale, figure["low"] * scale, figure["high"] * scale)


def _row(document: dict, scenario: str, mode: str, broker: str) -> dict:
    for row in document["summary"]:
        if (row["scenario"], row["mode"], row["broker"]) == (scenario, mode, broker):
            return row["figures"]
    return {}


def throughput_svg(document: dict, mode: str = "concurrent") -> str:
    """Produce msg/s by scenario (groups) and broker (bars), median with the runs' range."""
    scenarios = document["scenarios"]
    brokers = [b["name"] for b in document["brokers"]]
    series = {
        broker: [_bar(_row(document, s["name"], mode, broker).get("produce_msg_s")) for s in scenarios]
        for broker in brokers
    }
    chart = Chart(f"Produce throughput ({mode}), median and range", "messages per second", log_y=True)
    return bars(chart, [s.get("label", s["name"]) for s in scenarios], series)


def latency_svg(document: dict, scenario: str = "1KB-sync") -> str:
    """The publish latency percentiles (groups) of each broker and mode (bars), in ms."""
    brokers = [b["name"] for b in document["brokers"]]
    series = {
        f"{broker} ({mode})": [
            _bar(_row(document, scenario, mode, broker).get(key), 1e-3) for key, _ in PERCENTILES
        ]
        for broker in brokers
        for mode in document["params"]["modes"]
    }
    chart = Chart("Publish latency, 1 KB sync send", "milliseconds", log_y=True)
    return bars(chart, [label for _, label in PERCENTILES], series)


def write_report_figures(document: dict, folder: Path) -> list[Path]:
    """The main benchmark's pictures into ``folder``."""
    return [
        write(folder / "throughput.svg", throughput_svg(document)),
        write(folder / "latency.svg", latency_svg(document)),
    ]


def workers_svg(rows: list[tuple[int, float, float]]) -> str:
    """(workers, produce msg/s, consume msg/s) rows as two lines."""
    chart = Chart("A partitioned topic's throughput against workers", "messages per second", "workers")
    return lines(
        chart,
        {"produce": [(w, p) for w, p, _ in rows], "consume": [(w, c) for w, _, c in rows]},
    )


def fanout_svg(rows: list[tuple[int, float, float, float]]) -> str:
    """(consumers, P50, P99, max ms) rows: a message's delivery time against the consumers."""
    chart = Chart(
        "Broadcast: a message to every consumer",
        "milliseconds from the broker's timestamp",
        "consumers",
        log_x=True,
        log_y=True,
    )
    return lines(
        chart,
        {
            "P50": [(n, p50) for n, p50, _, _ in rows],
            "P99": [(n, p99) for n, _, p99, _ in rows],
            "max": [(n, top) for n, _, _, top in rows],
        },
    )


def broadcast_latency_svg(results: list[tuple[str, float, float, float]], consumers: int = 1000) -> str:
    """(way, p50, p99, max ms): the latency distribution of each way of fanning out."""
    chart = Chart(f"{consumers:,} consumers: latency from send to receipt", "milliseconds")
    names = [name for name, *_ in results]
    series = {
        label: [Bar(values[i]) for _, *values in results] for i, label in enumerate(("p50", "p99", "max"))
    }
    return bars(chart, names, series)


# -- the recorded tables of docs/benchmarks.md ----------------------------------------------------------


def table_after(markdown: str, heading: str, header_starts: str) -> list[list[str]]:
    """The rows (cells as text) of the first table under ``heading`` whose header row starts
    with ``header_starts``."""
    at = markdown.index(heading)
    lines_ = markdown[at:].splitlines()
    start = next(i for i, line in enumerate(lines_) if line.startswith(f"| {header_starts}"))
    rows = []
    for line in lines_[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def numbers(cell: str) -> list[float]:
    """The numbers in a cell: ``"1,360 / 2,720 / 2,737"`` -> [1360, 2720, 2737]."""
    return [float(n.replace(",", "")) for n in re.findall(r"\d[\d,]*(?:\.\d+)?", cell)]


def recorded_workers(markdown: str) -> list[tuple[int, float, float]]:
    rows = table_after(markdown, "## Workers: a partitioned topic", "workers")
    return [(int(numbers(r[0])[0]), numbers(r[1])[0], numbers(r[3])[0]) for r in rows]


def recorded_fanout(markdown: str) -> list[tuple[int, float, float, float]]:
    rows = table_after(
        markdown, "## Broadcast at 10K-100K consumers", "consumers (per connection) | messages x rate"
    )
    out = []
    for row in rows:
        p50, p99, top = numbers(row[6])[:3]
        out.append((int(numbers(row[0])[0]), p50, p99, top))
    return out


def recorded_broadcast_latency(markdown: str) -> list[tuple[str, float, float, float]]:
    rows = table_after(markdown, "## Broadcast: one message to 1,000 consumers", "| connect s")
    # each cell holds two runs' figures, "28.5 / 29.2": the first run's
    return [(row[0].strip("`"), numbers(row[2])[0], numbers(row[3])[0], numbers(row[4])[0]) for row in rows]


def main(argv: list[str] | None = None) -> int:
    folder = DOCS / FOLDER
    document = json.loads((DOCS / "benchmarks.json").read_text())
    markdown = (DOCS / "benchmarks.md").read_text()
    written = write_report_figures(document, folder)
    written.append(write(folder / "workers.svg", workers_svg(recorded_workers(markdown))))
    written.append(write(folder / "broadcast-fanout.svg", fanout_svg(recorded_fanout(markdown))))
    written.append(
        write(folder / "broadcast-latency.svg", broadcast_latency_svg(recorded_broadcast_latency(markdown)))
    )
    for path in written:
        print(path.relative_to(REPO), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
