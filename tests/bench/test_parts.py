"""The harness's pure parts, without brokers: stats, /proc readers, payloads and tally, hotspots, report."""

from __future__ import annotations

import os
import socket

import pytest

from bench import hotspots, report
from bench.procs import cpu_seconds, listening_ports, memory_kib
from bench.stats import latency_summary, percentile, ratio, spread
from bench.workload import Payloads, Tally


def test_spread_is_median_and_range_and_skips_missing():
    s = spread([3.0, None, 1.0, 2.0, float("nan")])
    assert (s.median, s.low, s.high, s.n) == (2.0, 1.0, 3.0, 3)
    assert spread([]) is None


def test_nearest_rank_percentiles():
    values = list(range(1, 1001))
    assert percentile(values, 0.5) == 500
    assert percentile(values, 0.99) == 990
    assert percentile(values, 0.999) == 999
    summary = latency_summary([5.0, 1.0, 3.0])
    assert summary["n"] == 3 and summary["p50"] == 3.0 and summary["max"] == 5.0


def test_ratio_needs_both_sides():
    assert ratio(2.0, 4.0) == 0.5
    assert ratio(None, 4.0) is None and ratio(1.0, 0) is None


def test_proc_readers_on_this_process():
    while sum(os.times()[:2]) < 0.1:  # a process that has done some work (pytest's start has)
        sum(i * i for i in range(10_000))
    times = os.times()
    assert abs(cpu_seconds(os.getpid()) - (times.user + times.system)) < 0.05  # as the kernel says
    memory = memory_kib(os.getpid())
    assert memory["VmHWM"] >= memory["VmRSS"] > 0


def test_listening_ports_finds_a_listening_socket_of_this_process():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert ("127.0.0.1", server.getsockname()[1]) in listening_ports(os.getpid())


@pytest.mark.parametrize("size", [1, 16, 100, 5000, 9000])
def test_payloads_carry_their_sequence_number_at_both_ends(size):
    payloads = Payloads(size)
    data = payloads.make(123456)
    assert len(data) == max(size, 16)
    assert payloads.read(data) == (123456, True)
    assert payloads.read(data[:-1])[1] is False
    assert payloads.read(data[:8] + b"\0" * (len(data) - 8))[1] is False


def test_tally_counts_duplicates_gaps_and_reordering():
    tally = Tally()
    for seq, entry in [(0, (1, 0)), (2, (1, 1)), (1, (1, 1)), (2, (1, 1))]:
        tally.add(seq, True, [entry])
    assert (tally.received, tally.unique, tally.duplicates, tally.out_of_order) == (4, 3, 1, 1)
    assert len(tally.entries) == 2
    receipted = bytearray([1, 1, 1, 1])  # seq 3 was receipted and never came
    assert tally.missing(receipted) == 1
    assert tally.unreceipted(bytearray([1, 0, 1, 1])) == 1


def test_hotspots_drop_idle_samples_and_give_unnamed_frames_to_their_caller(tmp_path):
    profile = tmp_path / "p.txt"
    profile.write_text(
        "main (magnetar/__main__.py:5);work (/x/magnetar/storage/segment.py:10);0x7f00 (libc.so.6) 6\n"
        "main (magnetar/__main__.py:5);Runner.run (asyncio/runners.py:118);epoll_pwait (libc.so.6) 90\n"
        "main (magnetar/__main__.py:5);other (/x/magnetar/broker/topic.py:3) 2\n"
    )
    total, by_self, by_total = hotspots.hotspots(hotspots.read_stacks([profile]))
    assert total == 8
    assert by_self[0].function == "storage/segment.py:work" and by_self[0].self_pct == 75.0
    assert by_total[0].total_pct == 100.0  # main is on every kept stack
    only_topic = hotspots.read_stacks([profile], only="topic.py")
    assert sum(only_topic.values()) == 2
    assert sum(hotspots.read_stacks([profile], keep_idle=True).values()) == 98


def test_report_keeps_figures_of_runs_with_duplicates_but_not_consume_figures_of_runs_with_gaps():
    broke = {"error": "boom", "received": 5}
    duplicated = {"received": 10, "duplicates": 2}
    gappy = {"received": 10, "missing": 3}
    assert not report._counts(broke, "produce_msg_s")
    assert report._counts(duplicated, "consume_msg_s")
    assert report._counts(gappy, "produce_msg_s") and not report._counts(gappy, "consume_msg_s")


def test_markdown_section_is_replaced_between_markers_and_the_rest_kept(tmp_path):
    path = tmp_path / "b.md"
    path.write_text(f"# Title\n\nprose before\n\n{report.BEGIN}\nold\n{report.END}\n\n## Profile\nkept\n")
    document = {
        "generated": "now",
        "command": "python -m bench",
        "elapsed_s": 1.0,
        "note": None,
        "machine": {
            "nproc": 2,
            "cpu_model": "cpu",
            "ram_gib": 1.0,
            "python": "3.11",
            "kernel": "6",
            "data_filesystem": "ext4",
            "pulsar_client": "3",
        },
        "brokers": [{"name": "magnetar-fsync", "about": "a", "version": "v"}],
        "params": {"repeat": 1, "duration_s": 1.0, "idle_timeout_s": 1.0, "modes": ["backlog"]},
        "scenarios": [{"name": "1MB", "label": "1 MB, async"}],
        "runs": [],
    }
    report.write_markdown(report.summarise(document), path)
    text = path.read_text()
    assert text.startswith("# Title\n\nprose before\n") and text.endswith("## Profile\nkept\n")
    assert "old" not in text and "### Throughput" in text and text.count(report.BEGIN) == 1
