"""Per-consumer figures of a broadcast subscription: the paged list behind
``.../subscription/{sub}/consumers``, the capped list in topic stats, and the largest lag, on a real
topic with recording connections (tests/interop/test_broadcast_ops.py asks over HTTP)."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.admin.consumers_api import consumer_page
from magnetar.admin.metrics import broadcast_metrics
from magnetar.admin.stats_api import topic_stats
from magnetar.broker.coarse_clock import CLOCK
from magnetar.broker.dispatchers.broadcast_stats import (
    PAGE_LIMIT,
    STATS_CONSUMERS,
    largest_lag,
    page_bounds,
)

from .recording import ack
from .test_broadcast_dispatch import publish_numbered, subscribe_many


def test_page_bounds_cap_the_limit_and_refuse_nonsense():
    assert page_bounds(0, 10) == (0, 10)
    assert page_bounds(50, 5000) == (50, 50 + PAGE_LIMIT)
    with pytest.raises(ValueError):
        page_bounds(-1, 10)
    with pytest.raises(ValueError):
        page_bounds(0, 0)


def test_pages_list_connected_consumers_in_subscribe_order_then_detached_virtual_cursors(
    on_topic, monkeypatch
):
    async def scenario(h, topic) -> None:
        consumers = subscribe_many(topic, 5)
        stored = await publish_numbered(h, 4, *consumers)
        monkeypatch.setattr(CLOCK, "now", 1_800_000_000.0)
        ack(consumers[1], *stored[:3])
        consumers[
            4
        ].cnx.closed = True  # lost: its virtual cursor is kept detached, listed after the connected ones
        sub = topic.subscriptions["fans"]
        sub.remove_consumer(consumers[4])
        now = asyncio.get_running_loop().time()

        first = consumer_page(sub, 0, 2, now)
        assert first["total"] == 5 and first["limit"] == 2
        assert [e["consumerName"] for e in first["consumers"]] == ["c0", "c1"]
        c0, c1 = first["consumers"]
        assert c0["msgBacklog"] == 4 and c0["lastAckedTimestamp"] == 0 and not c0["detached"]
        assert c1["msgBacklog"] == 1 and c1["markDeletePosition"] == str(stored[2])
        assert c1["lastAckedTimestamp"] == 1_800_000_000_000
        assert c1["msgOutCounter"] == 4 and c1["address"] == "recorded:0"
        assert c1["readPosition"] == str(topic.ml.next_position(stored[3]))
        assert c1["connectedSince"] is not None

        last = consumer_page(sub, 3, 10, now)
        listed = [(e["consumerName"], e["detached"]) for e in last["consumers"]]
        assert listed == [("c3", False), ("c4", True)]
        detached = last["consumers"][1]
        assert detached["msgBacklog"] == 4 and 0 < detached["keptForSeconds"] <= 60
        assert consumer_page(sub, 5, 10, now)["consumers"] == []

    on_topic(scenario)


def test_topic_stats_list_at_most_the_first_consumers_and_say_where_the_rest_are(on_topic):
    async def scenario(h, topic) -> None:
        subscribe_many(topic, STATS_CONSUMERS + 20)
        stats = topic_stats(topic)["subscriptions"]["fans"]
        assert len(stats["consumers"]) == STATS_CONSUMERS
        assert stats["consumers"][0]["consumerName"] == "c0"
        assert stats["consumersCount"] == STATS_CONSUMERS + 20
        assert stats["consumersListed"] == STATS_CONSUMERS and stats["detachedCount"] == 0
        local = topic.name.local_name
        assert stats["consumersPage"] == (
            f"/admin/v2/persistent/public/default/{local}/subscription/fans/consumers?offset=0&limit={PAGE_LIMIT}"
        )

    on_topic(scenario)


def test_the_largest_lag_is_the_lowest_connected_consumers(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 6, a, b)
        dispatcher = topic.subscriptions["fans"].dispatcher
        assert largest_lag(dispatcher) == 6
        ack(a, *stored)
        ack(b, *stored[:4])
        assert largest_lag(dispatcher) == 2
        ack(b, *stored)
        assert largest_lag(dispatcher) == 0

    on_topic(scenario)


def test_broadcast_metrics_per_subscription(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, a, b)
        ack(a, *stored)
        samples = {
            (metric.name, sample.labels["subscription"]): sample.value
            for metric in broadcast_metrics({str(topic.name): topic}, "standalone")
            for sample in metric.samples
        }
        assert samples[("magnetar_broadcast_consumers", "fans")] == 2
        assert samples[("magnetar_broadcast_detached_cursors", "fans")] == 0
        assert samples[("magnetar_broadcast_entry_reads", "fans")] >= 1
        assert samples[("magnetar_broadcast_entries_read", "fans")] == 3
        assert samples[("magnetar_broadcast_messages_out", "fans")] == 6
        assert samples[("magnetar_broadcast_lag_disconnects", "fans")] == 0
        assert samples[("magnetar_broadcast_consumer_lag_max", "fans")] == 3

    on_topic(scenario)
