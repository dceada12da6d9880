"""A spread topic's stats put together from its owner's and the other workers' parts (no broker)."""

from __future__ import annotations

from magnetar.admin.spread_stats import merge
from magnetar.broker.dispatchers.broadcast_stats import STATS_CONSUMERS


def _consumer(name: str, out: int = 3) -> dict:
    return {"consumerName": name, "address": "127.0.0.1:5000", "msgOutCounter": out, "unackedMessages": 1}


def _subscription(names: list[str], slowest: int | None, out: int, backlog: int = 9) -> dict:
    return {
        "msgRateOut": float(out),
        "msgThroughputOut": 10.0 * out,
        "msgOutCounter": out,
        "bytesOutCounter": 10 * out,
        "msgBacklog": backlog,
        "consumers": [_consumer(name) for name in names],
        "consumersCount": len(names),
        "consumersListed": len(names),
        "detachedCount": 1,
        **({"slowestBacklog": slowest} if slowest is not None else {}),
    }


def _owner() -> dict:
    return {
        "msgRateIn": 1.0,
        "subscriptions": {
            "fans": _subscription(["first", "car-1"], slowest=2, out=6),
            "plain": {"msgOutCounter": 4, "msgBacklog": 3, "consumers": [_consumer("worker")]},
        },
    }


def test_every_workers_consumers_are_listed_and_counted_with_the_worker_serving_each():
    parts = {
        "worker-1": {"worker": "worker-1", "subscriptions": {"fans": _subscription(["car-2"], 5, out=3)}},
        "worker-2": {"worker": "worker-2", "subscriptions": {}},  # follows nothing of the topic
    }
    stats = merge(_owner(), "worker-0", parts)
    fans = stats["subscriptions"]["fans"]
    assert [(c["consumerName"], c["worker"]) for c in fans["consumers"]] == [
        ("first", "worker-0"),
        ("car-1", "worker-0"),
        ("car-2", "worker-1"),
    ]
    assert fans["consumersCount"] == fans["consumersListed"] == 3
    assert fans["detachedCount"] == 2
    assert (fans["msgOutCounter"], fans["bytesOutCounter"], fans["msgRateOut"]) == (9, 90, 9.0)
    assert fans["msgBacklog"] == 5  # the slowest consumer's, whichever worker serves it
    assert "slowestBacklog" not in fans
    assert stats["ownerBroker"] == "worker-0" and "spreadWorkersMissing" not in stats
    plain = stats["subscriptions"]["plain"]  # not a broadcast one: the owner's alone
    assert plain["msgBacklog"] == 3 and [c["worker"] for c in plain["consumers"]] == ["worker-0"]


def test_a_worker_that_gives_no_part_is_named_and_one_without_consumers_keeps_the_owners_backlog():
    owner = _owner()
    owner["subscriptions"]["fans"] = _subscription([], slowest=None, out=0, backlog=7)
    stats = merge(owner, "worker-0", {"worker-1": None})
    assert stats["spreadWorkersMissing"] == ["worker-1"]
    assert stats["subscriptions"]["fans"]["msgBacklog"] == 7  # no consumer anywhere: the cursor's


def test_a_subscription_gone_at_the_owner_is_not_made_from_a_part_and_the_list_stays_short():
    many = [f"car-{i}" for i in range(STATS_CONSUMERS)]
    parts = {
        "worker-1": {
            "subscriptions": {"fans": _subscription(many, 1, out=1), "gone": _subscription(["x"], 1, out=1)}
        }
    }
    stats = merge(_owner(), "worker-0", parts)
    fans = stats["subscriptions"]["fans"]
    assert len(fans["consumers"]) == fans["consumersListed"] == STATS_CONSUMERS
    assert fans["consumersCount"] == STATS_CONSUMERS + 2
    assert "gone" not in stats["subscriptions"]
