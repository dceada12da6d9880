"""``magnetar perf produce | consume``: the report's arithmetic and lines without a network, then the
real commands as child processes against a real broker, their counts checked with the broker's."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys

import pytest

from magnetar.cli.perf.produce import ProduceSettings, key_function, payload_of
from magnetar.cli.perf.report import (
    HIGHEST_MICROS,
    Latency,
    Recorder,
    new_histogram,
    produced_line,
    produced_summary,
    received_line,
    record_latency,
    topic_names,
)
from magnetar.client.aio import CompressionType
from tests.interop.support import admin_call
from tests.waiting import eventually

from .conftest import magnetar

NUMBER = r"[0-9]+(?:\.[0-9]+)?"
LATENCY = (
    rf"Latency: mean: {NUMBER} ms - med: {NUMBER} - 95pct: {NUMBER} - 99pct: {NUMBER} - "
    rf"99\.9pct: {NUMBER} - 99\.99pct: {NUMBER} - Max: {NUMBER}"
)
PRODUCED = re.compile(
    rf"Throughput produced: (\d+) msg --- ({NUMBER}) msg/s --- {NUMBER} Mbit/s --- failures (\d+) --- "
    + LATENCY
)
RECEIVED = re.compile(
    rf"Throughput received: (\d+) msg --- ({NUMBER}) msg/s --- {NUMBER} Mbit/s --- {LATENCY}"
)
SENT_TOTAL = re.compile(r"Aggregated throughput stats --- (\d+) records sent --- .* failures (\d+) ---")
RECEIVED_TOTAL = re.compile(r"Aggregated throughput stats --- (\d+) records received ---")


# --- the pure part ---------------------------------------------------------------------------------


def test_latency_percentiles_come_from_the_histogram_in_milliseconds():
    histogram = new_histogram()
    for ms in range(1, 1001):  # 1 ms .. 1000 ms, once each
        record_latency(histogram, ms * 1000)
    latency = Latency.of(histogram)
    assert latency.count == 1000
    assert latency.mean == pytest.approx(500.5, rel=1e-3)
    med, p95, p99, p999, p9999 = latency.percentiles
    assert med == pytest.approx(500, rel=2e-3) and p95 == pytest.approx(950, rel=2e-3)
    assert p99 == pytest.approx(990, rel=2e-3) and p999 == pytest.approx(999, rel=2e-3)
    assert p9999 == pytest.approx(1000, rel=2e-3) and latency.max == pytest.approx(1000, rel=2e-3)
    assert latency.text().startswith("mean: 500.5")


def test_an_empty_histogram_reads_zero_and_out_of_range_latencies_are_clamped():
    assert Latency.of(new_histogram()) == Latency(0, 0.0, (0.0,) * 5, 0.0)
    histogram = new_histogram()
    record_latency(histogram, -5_000)  # a publish time from a clock ahead of ours
    record_latency(histogram, HIGHEST_MICROS * 10)
    latency = Latency.of(histogram)
    assert latency.count == 2 and latency.percentiles[0] == 0
    assert latency.max == pytest.approx(HIGHEST_MICROS / 1000, rel=1e-3)


def test_a_window_counts_what_happened_since_the_last_report_and_the_total_all_of_it():
    recorder = Recorder(started=100.0)
    for _ in range(3):
        recorder.success(1024, 2_000)
    recorder.failure()
    first = recorder.take_window(now=102.0)
    assert (first.messages, first.bytes, first.failures, first.seconds) == (3, 3072, 1, 2.0)
    assert first.rate == 1.5 and first.failure_rate == 0.5
    assert first.mbit == pytest.approx(3072 * 8 / 2**20 / 2)
    assert first.latency.mean == pytest.approx(2.0, rel=1e-3)
    recorder.success(1024, 8_000)
    second = recorder.take_window(now=103.0)
    assert (second.messages, second.failures, second.seconds) == (1, 0, 1.0)
    assert second.latency.max == pytest.approx(8.0, rel=1e-3)
    empty = recorder.take_window(now=104.0)
    assert empty.messages == 0 and empty.latency.count == 0
    total = recorder.total(now=105.0)
    assert (total.messages, total.failures, total.seconds, recorder.messages) == (4, 1, 5.0, 4)
    assert total.latency.max == pytest.approx(8.0, rel=1e-3)


def test_the_printed_lines_read_as_pulsar_perf_s():
    recorder = Recorder(started=0.0)
    recorder.success(100, 1_500)
    window = recorder.take_window(now=1.0)
    match = PRODUCED.fullmatch(produced_line(window))
    assert match and match.groups()[:3] == ("1", "1.0", "0")
    assert received_line(window).startswith("Throughput received: 1 msg --- 1.0 msg/s --- 0.001 Mbit/s")
    assert RECEIVED.fullmatch(received_line(window))
    sent, latency = produced_summary(recorder.total(now=2.0))
    assert SENT_TOTAL.match(sent).groups() == ("1", "0") and sent.endswith("--- 2.000 s")
    assert re.fullmatch(rf"Aggregated latency stats --- {LATENCY}", latency)


def test_topics_expand_as_pulsar_perf_names_them():
    assert topic_names("t", 1) == ["t"]
    assert topic_names("persistent://a/b/t", 3) == [f"persistent://a/b/t-{i}" for i in range(3)]
    with pytest.raises(ValueError):
        topic_names("t", 0)


def settings(**changes: object) -> ProduceSettings:
    base: dict[str, object] = {
        "topics": ["t"],
        "rate": 0.0,
        "size": 10,
        "num_messages": 0,
        "duration": 0.0,
        "producers_per_topic": 1,
        "batch_time_ms": 1.0,
        "batch_max_messages": 500,
        "batch_max_bytes": 4096,
        "compression": "lz4",
        "chunking": False,
        "max_outstanding": 100,
        "interval": 1.0,
        "key_mode": None,
        "quiet": False,
    }
    return ProduceSettings(**{**base, **changes})  # type: ignore[arg-type]


def test_producer_options_batch_unless_the_window_is_zero_or_chunking_is_on():
    options = settings().producer_options()
    assert options["batching_enabled"] and options["batching_max_messages"] == 500
    assert options["compression_type"] is CompressionType.LZ4 and options["max_pending_messages"] == 100
    assert settings(batch_time_ms=0).producer_options()["batching_enabled"] is False
    chunked = settings(chunking=True).producer_options()
    assert chunked["chunking_enabled"] and not chunked["batching_enabled"]


def test_payload_and_keys():
    import random

    rng = random.Random(7)
    payload = payload_of(300, rng)
    assert len(payload) == 300 and set(payload) <= set(range(ord("A"), ord("Z") + 1))
    assert key_function(None, rng)(5) is None
    assert key_function("autoIncrement", rng)(5) == "5"
    assert key_function("random", rng)(5).isdigit()


# --- the commands -----------------------------------------------------------------------------------


def stats(broker, topic: str) -> dict:
    status, body = admin_call(broker, "GET", "/admin/v2/" + topic.replace("://", "/") + "/stats")
    assert status == 200, body
    return body


def lines(text: str, pattern: re.Pattern[str]) -> list[re.Match[str]]:
    """The lines of ``text`` that start as ``pattern``, matched."""
    return [m for m in map(pattern.match, text.splitlines()) if m]


@pytest.mark.slow
@pytest.mark.interop
def test_perf_produce_paces_and_counts_what_the_broker_stored_and_perf_consume_receives_it(broker, topic):
    url = broker.service_url
    subscription = ["-ss", "perf", "-sp", "Earliest", "-st", "Shared"]
    command = ["perf", "consume", topic, *subscription, "-i", "1", "-time", "60", "--url", url]
    consumer = subprocess.Popen(
        [sys.executable, "-m", "magnetar", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(
            lambda: "perf" in stats(broker, topic)["subscriptions"], what="perf consume's subscription"
        )
        done = magnetar(
            "perf", "produce", topic, "-r", "200", "--test-duration", "3", "-i", "1", "--url", url
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
        windows = lines(done.stdout, PRODUCED)
        assert len(windows) >= 2, done.stdout
        # Paced: never above the rate (a loaded machine may fall below it, which is not the
        # tool's doing: speed is the benchmarks' business, not a test's).
        for window in windows[:-1]:  # the last may be cut short by the end of the run
            assert 0 < float(window.group(2)) <= 280, window.group(0)
            assert window.group(3) == "0"
        (summary,) = lines(done.stdout, SENT_TOTAL)
        sent = int(summary.group(1))
        assert 0 < sent <= 610 and summary.group(2) == "0"
        assert stats(broker, topic)["msgInCounter"] == sent
        eventually(
            lambda: stats(broker, topic)["subscriptions"]["perf"]["msgBacklog"] == 0,
            what="perf consume acknowledging every message",
        )
        consumer.send_signal(signal.SIGINT)  # Ctrl-C: the summary, and exit 0
        out, err = consumer.communicate(timeout=30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
    assert consumer.returncode == 0, err
    assert "Traceback" not in err
    assert lines(out, RECEIVED), out
    (received,) = lines(out, RECEIVED_TOTAL)
    assert int(received.group(1)) == sent
    assert re.search(rf"Aggregated end-to-end latency stats --- {LATENCY}", out)

    # -m is a total over every producer of every topic (-t 2: TOPIC-0, TOPIC-1), unthrottled.
    done = magnetar(
        "perf", "produce", topic, "-t", "2", "-n", "2", "-r", "0", "-m", "3000", "--quiet", "--url", url
    )
    assert done.returncode == 0, done.stderr
    assert not lines(done.stdout, PRODUCED)
    (summary,) = lines(done.stdout, SENT_TOTAL)
    assert summary.groups() == ("3000", "0")
    assert sum(stats(broker, f"{topic}-{i}")["msgInCounter"] for i in range(2)) == 3000


def test_bad_flags_exit_2_with_usage():
    for args in (
        ("perf", "produce"),  # no topic
        ("perf", "produce", "t", "-r", "-1"),
        ("perf", "produce", "t", "-z", "brotli"),
        ("perf", "produce", "t", "--test-duration", "soon"),
        ("perf", "consume", "t", "-st", "Everyone"),
        ("perf", "consume", "t", "--bogus"),
    ):
        done = magnetar(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert "Usage: magnetar perf" in done.stderr and "Traceback" not in done.stderr


def test_an_unreachable_broker_is_one_line_and_exit_1():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for command in ("produce", "consume"):
        done = magnetar("perf", command, "t", "-time", "5", "--url", f"pulsar://127.0.0.1:{port}", timeout=20)
        assert done.returncode == 1
        assert done.stderr.startswith(f"Error: pulsar://127.0.0.1:{port}: ") and done.stderr.count("\n") == 1
        assert done.stdout == ""


@pytest.mark.slow
@pytest.mark.interop
def test_perf_produce_of_messages_over_the_limit_fails_unless_chunked(broker, topic):
    url = broker.service_url
    done = magnetar("perf", "produce", topic, "-s", "6000000", "-m", "1", "-r", "0", "--quiet", "--url", url)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: no message was stored; the first failure: MessageTooBig")
    assert SENT_TOTAL.match(done.stdout).groups() == ("0", "1")
    done = magnetar("perf", "produce", topic, "-s", "6000000", "-m", "2", "-r", "0", "-ch", "--url", url)
    assert done.returncode == 0, done.stderr
    assert SENT_TOTAL.match(done.stdout).groups() == ("2", "0")
