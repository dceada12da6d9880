"""Pure dispatch decisions, tested without a network or storage."""

from dataclasses import dataclass

from magnetar.broker.dispatchers.shared import ReplayQueue
from magnetar.broker.dispatchers.single_active import choose_active
from magnetar.broker.seek import _first_index
from magnetar.storage.position import Position


@dataclass
class FakeConsumer:  # only the two attributes choose_active reads
    name: str
    priority_level: int = 0


def test_first_connected_is_active_on_plain_topic():
    consumers = [FakeConsumer("b"), FakeConsumer("a")]
    assert choose_active(consumers, -1) is consumers[0]
    assert choose_active([], -1) is None


def test_partitions_spread_over_highest_priority_sorted_by_name():
    a, b, c = FakeConsumer("a"), FakeConsumer("b"), FakeConsumer("c", priority_level=1)
    consumers = [c, b, a]
    assert [choose_active(consumers, p).name for p in range(4)] == ["a", "b", "a", "b"]


def test_replay_queue_keeps_positions_sorted_and_unique():
    q = ReplayQueue()
    for p in [Position(2, 1), Position(1, 5), Position(2, 0), Position(1, 5)]:
        q.add(p)
    assert len(q) == 3
    q.discard(Position(2, 0))
    q.discard(Position(9, 9))
    assert q.pop_first(10) == [Position(1, 5), Position(2, 1)]
    assert len(q) == 0


def test_first_index_is_a_binary_search():
    values = [1, 3, 3, 7, 9]
    calls = []

    def at_or_after(i):
        calls.append(i)
        return values[i] >= 3

    assert _first_index(len(values), at_or_after) == 1
    assert len(calls) <= 3
    assert _first_index(len(values), lambda i: values[i] >= 100) == len(values)
    assert _first_index(0, lambda i: True) == 0
