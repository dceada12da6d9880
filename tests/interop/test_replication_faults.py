"""Geo-replication under faults, judged by the official client: whatever breaks (the centre
killed, an edge killed before its replication cursor was flushed, the centre away for a while,
a message the centre refuses), every message produced at an edge is at the centre exactly once,
in its producer's order, once things are back.

Each payload is unique (``{producer}-{i}``), so a duplicate, a loss or a reordering shows in
what a reader reads at the centre from the beginning, after every edge's replication backlog
is 0 (all the replicator sent was receipted, so nothing more can come).
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from collections.abc import Iterable

import pulsar
import pytest
from pulsar.exceptions import ProducerBlockedQuotaExceededException

from tests.waiting import eventually

from .replication_support import replication_stats
from .support import admin_call, read_stored

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: clusters killed and restarted mid-stream

#: Small batches, so a few thousand messages are many entries for the replicator to copy.
BATCH = {"batching_enabled": True, "batching_max_messages": 10, "batching_max_publish_delay_ms": 1}
#: Cursors and the topic's state snapshot are not flushed by time during a test (only at a clean
#: close): a kill -9 loses all of it, the worst case.
NO_CURSOR_FLUSH = {"cursor_flush_interval_seconds": 3600.0}


def payloads(producer: str, start: int, stop: int) -> list[str]:
    return [f"{producer}-{i:05d}" for i in range(start, stop)]


def assert_exactly_once(got: list[str], expected: dict[str, list[str]]) -> None:
    """``got`` holds every expected payload once and nothing else, each producer's in order."""
    counts = Counter(got)
    wanted = {p for values in expected.values() for p in values}
    duplicated = sorted(p for p, n in counts.items() if n > 1)
    missing = sorted(wanted - counts.keys())
    extra = sorted(counts.keys() - wanted)
    problems = []
    if duplicated:
        problems.append(f"{len(duplicated)} more than once: {duplicated[:5]}...{duplicated[-2:]}")
    if missing:
        problems.append(f"{len(missing)} missing: {missing[:5]}...{missing[-2:]}")
    if extra:
        problems.append(f"{len(extra)} unexpected: {extra[:5]}")
    assert not problems, "at the centre: " + "; ".join(problems)
    for producer, values in expected.items():
        mine = [p for p in got if p.startswith(f"{producer}-")]
        assert mine == values, f"{producer}'s messages arrived out of order"


def read_centre(client: pulsar.Client, topic: str) -> list[str]:
    """Every payload of ``topic`` from its start, as a reader reads them."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        return [m.data().decode() for m in read_stored(reader)]
    finally:
        reader.close()


def backlog(edge, topic: str, remote: str = "central") -> int:
    return replication_stats(edge, topic)[remote]["replicationBacklog"]


def wait_drained(edges: Iterable, topic: str, timeout: float = 15.0) -> None:
    """Every edge's replicator to the centre has had every entry receipted, and is connected."""
    for edge in edges:

        def drained(edge=edge) -> bool:
            stats = replication_stats(edge, topic)["central"]
            assert stats["replicationBacklog"] == 0 and stats["connected"], stats
            return True

        eventually(drained, timeout=timeout, what=f"{edge.service_url}'s replication to drain")


def sent_out(edge, topic: str) -> int:
    """Messages the edge's replicator has had stored at the centre (this run of the broker)."""
    return replication_stats(edge, topic).get("central", {}).get("msgOutCount", 0)


def retry_backoffs(broker) -> list[float]:
    """The waits the edge's replicator logged before each try again (``trying again in X s``)."""
    return [float(x) for x in re.findall(r"trying again in ([0-9.]+) s", broker.log_path.read_text())]


class Stream(threading.Thread):
    """One producer at an edge sending ``total`` batched messages, flushing every ``step`` (so
    its progress, ``sent``, is what the edge has stored)."""

    def __init__(self, client: pulsar.Client, topic: str, name: str, total: int, step: int = 100) -> None:
        super().__init__(daemon=True, name=f"stream {name}")
        self.producer = client.create_producer(topic, producer_name=name, **BATCH)
        self.name_ = name
        self.total = total
        self.step = step
        self.sent = 0
        self.errors: list[object] = []

    def run(self) -> None:
        def done(result, _msg_id) -> None:
            if result != pulsar.Result.Ok:
                self.errors.append(result)

        for start in range(0, self.total, self.step):
            for value in payloads(self.name_, start, min(start + self.step, self.total)):
                self.producer.send_async(value.encode(), done)
            self.producer.flush()
            self.sent = min(start + self.step, self.total)

    def finish(self) -> None:
        self.join(30)
        assert not self.is_alive(), f"{self.name_} did not finish sending"
        assert not self.errors, f"{self.name_}'s sends failed: {self.errors[:5]}"
        assert self.sent == self.total


def test_central_killed_mid_stream_then_exactly_once(clusters, client_factory, topic):
    edge1, edge2 = clusters.start("edge1", "edge2")
    (central,) = clusters.start("central", config=NO_CURSOR_FLUSH)
    for edge in ("edge1", "edge2"):
        clusters.link(edge, "central")
        clusters.replicate(edge, [edge, "central"])
    total = 3000
    streams = [
        Stream(client_factory(broker.service_url), topic, f"sensor-{name}", total)
        for name, broker in (("edge1", edge1), ("edge2", edge2))
    ]
    for stream in streams:
        stream.start()
    # The centre dies while the edges produce and their replicators copy.
    eventually(lambda: sent_out(edge1, topic) > 0 and sent_out(edge2, topic) > 0, what="replication started")
    central.kill9()
    at_kill = [stream.sent for stream in streams]
    eventually(
        lambda: all(s.sent >= min(total, k + 500) for s, k in zip(streams, at_kill, strict=True)),
        what="the edges producing on with the centre down",
    )
    for edge in (edge1, edge2):
        eventually(
            lambda edge=edge: not replication_stats(edge, topic)["central"]["connected"],
            what="the edge to see the centre gone",
        )
    central.restart()
    for stream in streams:
        stream.finish()

    wait_drained((edge1, edge2), topic)
    got = read_centre(client_factory(central.service_url), topic)
    assert_exactly_once(got, {s.name_: payloads(s.name_, 0, total) for s in streams})


def test_centre_and_edge_killed_then_everything_sent_again_is_dropped(clusters, client_factory, topic):
    # Both lose what they did not flush: the edge its replication cursor (so it sends
    # everything again), the centre its deduplication snapshot (so it must tell from its entries
    # that it has them all).
    (edge,) = clusters.start("edge", config=NO_CURSOR_FLUSH)
    (central,) = clusters.start("central", config=NO_CURSOR_FLUSH)
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    total = 500
    producer = client_factory(edge.service_url).create_producer(topic, producer_name="sensor", **BATCH)
    for value in payloads("sensor", 0, total):
        producer.send_async(value.encode(), None)
    producer.flush()
    wait_drained([edge], topic)
    central.kill9()
    edge.kill9()
    central.restart()
    edge.restart()
    client = client_factory(edge.service_url)
    client.create_reader(topic, pulsar.MessageId.latest).close()  # loads the topic: it replicates again
    wait_drained([edge], topic)
    got = read_centre(client_factory(central.service_url), topic)
    assert_exactly_once(got, {"sensor": payloads("sensor", 0, total)})


def test_edge_killed_before_its_cursor_is_flushed_then_exactly_once(clusters, client_factory, topic):
    # The edge deduplicates its own producer's resends after the restart, so what it stores is
    # each payload once; its replication cursor is only in memory when it dies.
    (edge,) = clusters.start("edge", config={**NO_CURSOR_FLUSH, "deduplication_enabled": True})
    (central,) = clusters.start("central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    total = 3000
    stream = Stream(client_factory(edge.service_url), topic, "sensor", total)
    stream.start()
    eventually(lambda: sent_out(edge, topic) >= 200, what="replication under way")
    edge.kill9()
    assert stream.sent < total, "the stream ended before the kill: make it longer"
    edge.restart()
    stream.finish()  # the producer reconnected to the restarted edge and sent the rest

    # The replicator started again from the cursor's last flush, before what the centre has:
    # those entries were sent again and the centre's deduplication dropped them.
    wait_drained([edge], topic)
    expected = {"sensor": payloads("sensor", 0, total)}
    assert_exactly_once(read_centre(client_factory(edge.service_url), topic), expected)
    assert_exactly_once(read_centre(client_factory(central.service_url), topic), expected)


def test_centre_away_never_blocks_local_producers_and_the_lag_drains(clusters, client_factory, topic):
    edge, central = clusters.start("edge", "central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    producer = client_factory(edge.service_url).create_producer(
        topic, producer_name="sensor", batching_enabled=False
    )
    before, during = 50, 400
    for value in payloads("sensor", 0, before):
        producer.send(value.encode())
    wait_drained([edge], topic)

    central.stop()
    eventually(
        lambda: not replication_stats(edge, topic)["central"]["connected"],
        what="the edge to see the centre gone",
    )
    slowest = 0.0
    started = time.monotonic()
    for i, value in enumerate(payloads("sensor", before, before + during)):
        t0 = time.monotonic()
        producer.send(value.encode())
        slowest = max(slowest, time.monotonic() - t0)
        if i == during // 2 - 1:
            half = backlog(edge, topic)
    elapsed = time.monotonic() - started
    assert slowest < 2.0, f"a local send took {slowest:.2f} s with the centre away"
    assert elapsed < 10.0, f"{during} local sends took {elapsed:.1f} s with the centre away"
    stats = replication_stats(edge, topic)["central"]
    assert stats["connected"] is False
    assert half == during // 2 and stats["replicationBacklog"] == during, (half, stats)
    assert stats["replicationDelayInSeconds"] >= 0

    central.restart()
    wait_drained([edge], topic)
    got = read_centre(client_factory(central.service_url), topic)
    assert_exactly_once(got, {"sensor": payloads("sensor", 0, before + during)})


def test_a_message_the_centre_refuses_holds_replication_until_it_is_taken(clusters, client_factory, topic):
    limit = 64 * 1024
    (edge,) = clusters.start("edge")
    (central,) = clusters.start("central", config={"max_message_size": limit})
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    producer = client_factory(edge.service_url).create_producer(
        topic, producer_name="sensor", batching_enabled=False
    )
    big = "sensor-00010-" + "x" * (2 * limit)
    expected = [*payloads("sensor", 0, 10), big, *payloads("sensor", 11, 21)]
    for value in expected:
        producer.send(value.encode())  # the edge takes them all: its limit is larger

    def held() -> dict:
        stats = replication_stats(edge, topic)["central"]
        error = stats.get("lastError", "")  # absent until the replicator runs
        assert "refuses" in error and f"limit of {limit}" in error, stats
        assert stats["replicationBacklog"] == 11, stats
        return stats

    stats = eventually(held, what="replication held at the big message")
    assert stats["refusedEntries"] == 1
    reader_client = client_factory(central.service_url)
    assert read_centre(reader_client, topic) == payloads("sensor", 0, 10), (
        "replication went past the refused message"
    )
    assert backlog(edge, topic) == 11
    # Tried again with a growing backoff, not every 0.1 s for as long as the centre refuses.
    eventually(lambda: retry_backoffs(edge)[:3] == [0.1, 0.2, 0.4], what="the backoff to grow")

    central.stop()
    central.config = {**(central.config or {}), "max_message_size": 4 * limit}
    central.restart()
    wait_drained([edge], topic)
    got = read_centre(client_factory(central.service_url), topic)
    assert got == expected
    stats = replication_stats(edge, topic)["central"]
    assert stats["refusedEntries"] == 0 and stats["lastError"] == "", stats


def test_a_backlog_quota_counts_what_the_centre_is_still_owed(clusters, client_factory, topic):
    """Local producers are held back by the remote's absence only where a backlog quota says so:
    the replication cursor counts for a size quota as a slow subscription does."""
    (edge,) = clusters.start("edge", config={"backlog_quota_check_interval_seconds": 0.2})
    (central,) = clusters.start("central")
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    quota = {"limitSize": 20_000, "policy": "producer_exception"}
    assert admin_call(edge, "POST", "/admin/v2/namespaces/public/default/backlogQuota", quota)[0] == 204
    central.stop()
    client = client_factory(edge.service_url)
    producer = client.create_producer(topic, batching_enabled=False)
    for n in range(30):  # ~30 KB owed to the centre, no subscription at all
        producer.send(b"%04d" % n + b"x" * 996)
    eventually(lambda: backlog(edge, topic) == 30)

    def refused() -> bool:
        try:
            client.create_producer(topic).close()
        except ProducerBlockedQuotaExceededException:
            return True
        return False

    eventually(refused, what="new producers refused by the quota")
    central.restart()
    wait_drained([edge], topic, timeout=30)
    client.create_producer(topic).send(b"after")  # within the quota again
    got = read_centre(client_factory(central.service_url), topic)
    assert got == [f"{n:04d}" + "x" * 996 for n in range(30)] + ["after"]
