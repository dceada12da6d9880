"""The benchmarks' pictures: the SVG writer (bench/svg.py) and the figures of docs/benchmarks.md
drawn again from what is recorded there (bench/plots.py)."""

from __future__ import annotations

import json
from xml.etree import ElementTree

from bench import plots
from bench.svg import Bar, Chart, bars, lines, nice_ticks

SVG = "{http://www.w3.org/2000/svg}"


def parse(svg: str) -> ElementTree.Element:
    return ElementTree.fromstring(svg)


def test_bars_are_drawn_per_group_and_series_and_names_are_escaped():
    svg = bars(
        Chart("Rates <&>", "msg/s"),
        ["a", "b"],
        {"one": [Bar(10, 8, 12), Bar(20)], "two <x>": [None, Bar(5)]},
    )
    root = parse(svg)  # well-formed: the names went in escaped
    rects = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(rects) == 3
    assert len(list(root.iter(f"{SVG}line"))) >= 2  # the whisker of the bar with a range, the axis
    assert "Rates &lt;&amp;&gt;" in svg and "two &lt;x&gt;" in svg


def test_lines_have_a_marker_per_point_on_log_axes():
    svg = lines(Chart("t", "ms", "n", log_x=True, log_y=True), {"p50": [(1000, 18), (100_000, 1360)]})
    root = parse(svg)
    assert len(list(root.iter(f"{SVG}circle"))) == 2 and len(list(root.iter(f"{SVG}polyline"))) == 1
    assert "100k" in svg and "1k" in svg


def test_ticks_cover_the_values():
    assert nice_ticks(0, 73, False) == [0, 20, 40, 60, 80]
    assert nice_ticks(18, 2737, True) == [10, 100, 1000, 10000]


def test_the_recorded_tables_are_read():
    markdown = (plots.DOCS / "benchmarks.md").read_text()
    assert plots.recorded_workers(markdown) == [(1, 38450, 78924), (2, 39470, 62609)]
    fanout = plots.recorded_fanout(markdown)
    assert fanout[0] == (1000, 18, 39, 44) and fanout[-1] == (100_000, 1360, 2720, 2737)
    assert plots.recorded_broadcast_latency(markdown)[0] == ("magnetar-broadcast", 28.5, 74, 101)


def test_the_committed_pictures_are_what_the_recorded_figures_give():
    folder = plots.DOCS / plots.FOLDER
    document = json.loads((plots.DOCS / "benchmarks.json").read_text())
    markdown = (plots.DOCS / "benchmarks.md").read_text()
    expected = {
        "throughput.svg": plots.throughput_svg(document),
        "latency.svg": plots.latency_svg(document),
        "workers.svg": plots.workers_svg(plots.recorded_workers(markdown)),
        "broadcast-fanout.svg": plots.fanout_svg(plots.recorded_fanout(markdown)),
        "broadcast-latency.svg": plots.broadcast_latency_svg(plots.recorded_broadcast_latency(markdown)),
    }
    for name, svg in expected.items():
        assert (folder / name).read_text() == svg, f"{name}: run python -m bench.plots"
        assert f"]({plots.FOLDER}/{name})" in markdown, f"docs/benchmarks.md does not show {name}"
