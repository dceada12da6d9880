"""Summing a partitioned topic's stats from its partitions' (no broker)."""

from __future__ import annotations

from magnetar.admin.stats_api import partitioned_stats


def _partition(rate_in: float, size: int, publishers: list[dict], subscriptions: dict) -> dict:
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": rate_in * size,
        "averageMsgSize": float(size) if rate_in else 0.0,
        "msgInCounter": int(rate_in * 10),
        "bytesInCounter": int(rate_in * 10) * size,
        "msgRateOut": rate_in * 2,
        "msgThroughputOut": rate_in * 2 * size,
        "msgOutCounter": int(rate_in * 20),
        "bytesOutCounter": int(rate_in * 20) * size,
        "storageSize": 1000,
        "publishers": publishers,
        "subscriptions": subscriptions,
        "ledgers": [],
        "lastConfirmedEntry": "1:2",
    }


def _publisher(name: str, rate: float, size: int) -> dict:
    return {
        "producerId": 0,
        "producerName": name,
        "msgRateIn": rate,
        "msgThroughputIn": rate * size,
        "averageMsgSize": float(size),
        "msgInCounter": 5,
        "bytesInCounter": 5 * size,
    }


def _subscription(backlog: int, consumers: list[str]) -> dict:
    return {
        "msgRateOut": 1.0,
        "msgThroughputOut": 100.0,
        "msgOutCounter": 3,
        "bytesOutCounter": 300,
        "msgBacklog": backlog,
        "durable": True,
        "type": "Shared",
        "consumers": [{"consumerName": name} for name in consumers],
        "markDeletePosition": "1:0",
    }


def test_partitions_are_summed_and_merged_by_name():
    parts = {
        "t-partition-0": _partition(10.0, 100, [_publisher("p", 10.0, 100)], {"s": _subscription(4, ["a"])}),
        "t-partition-1": _partition(30.0, 200, [_publisher("p", 30.0, 200)], {"s": _subscription(6, ["b"])}),
    }
    total = partitioned_stats(parts)
    assert total["msgRateIn"] == 40.0 and total["msgThroughputIn"] == 7_000.0
    assert total["averageMsgSize"] == 175.0  # bytes over messages, not the mean of the averages
    assert (total["msgInCounter"], total["bytesInCounter"]) == (400, 100 * 100 + 300 * 200)
    assert total["msgRateOut"] == 80.0 and total["msgOutCounter"] == 800
    assert total["storageSize"] == 2000
    (publisher,) = total["publishers"]
    assert publisher["producerName"] == "p"
    assert (publisher["msgRateIn"], publisher["averageMsgSize"]) == (40.0, 175.0)
    sub = total["subscriptions"]["s"]
    assert (sub["msgBacklog"], sub["msgRateOut"], sub["msgOutCounter"]) == (10, 2.0, 6)
    assert [c["consumerName"] for c in sub["consumers"]] == ["a", "b"]
    assert "markDeletePosition" not in sub  # a position belongs to one partition
    assert total["metadata"] == {"partitions": 2}
    assert set(total["partitions"]) == set(parts)
    assert partitioned_stats(parts, per_partition=False)["partitions"] == {}


def test_a_subscription_on_some_partitions_only_and_an_idle_topic():
    parts = {
        "t-partition-0": _partition(0.0, 100, [], {"s": _subscription(2, [])}),
        "t-partition-1": _partition(0.0, 100, [], {}),
    }
    total = partitioned_stats(parts)
    assert total["subscriptions"]["s"]["msgBacklog"] == 2
    assert total["averageMsgSize"] == 0.0 and total["publishers"] == []


def test_a_broadcast_subscription_sums_its_consumer_counts_and_lists_each_partitions_page():
    def broadcast(partition: int, connected: int, detached: int) -> dict:
        sub = _subscription(0, [f"c{partition}-{i}" for i in range(min(connected, 2))])
        page = (
            f"/admin/v2/persistent/t/n/t-partition-{partition}/subscription/fans/consumers?offset=0&limit=100"
        )
        return {
            **sub,
            "consumersCount": connected,
            "consumersListed": min(connected, 2),
            "detachedCount": detached,
            "consumersPage": page,
        }

    parts = {
        f"t-partition-{n}": _partition(1.0, 10, [], {"fans": broadcast(n, connected, detached)})
        for n, (connected, detached) in enumerate([(5000, 3), (7000, 0)])
    }
    sub = partitioned_stats(parts)["subscriptions"]["fans"]
    assert (sub["consumersCount"], sub["consumersListed"], sub["detachedCount"]) == (12_000, 4, 3)
    assert [p.split("/")[6] for p in sub["consumersPages"]] == ["t-partition-0", "t-partition-1"]
