"""Pure dispatch decisions, tested without a network or storage."""

from dataclasses import dataclass

from magnetar.broker.dispatchers.replay_queue import ReplayQueue
from magnetar.broker.dispatchers.single_active import choose_active
from magnetar.broker.entries import DispatchEntry, RecentEntries
from magnetar.broker.seek import _first_index
from magnetar.protocol import wire
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.entry import Entry
from magnetar.storage.position import Position

from .entry_harness import batch, entry_metadata_prefix, message


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


def test_recent_entries_give_what_parsing_gives_and_forget_the_oldest():
    prefix = entry_metadata_prefix(wire.BrokerEntryMetadata(index=7))
    stored = [message(b"one"), batch([b"a", b"b", b"c"]), message(b"three")]
    entries = [Entry(Position(4, i), prefix + data) for i, data in enumerate(stored)]
    recent = RecentEntries(capacity=2)
    for entry, data in zip(entries, stored, strict=True):
        recent.remember(entry.position, len(prefix), parse_metadata(data)[0])

    for entry in entries:
        got, parsed = recent.entry(entry), DispatchEntry.of(entry)
        assert (got.position, got.producer_offset, got.num_messages, got.is_batch) == (
            parsed.position,
            parsed.producer_offset,
            parsed.num_messages,
            parsed.is_batch,
        )
        assert bytes(got.payload_for(False)) == bytes(parsed.payload_for(False))
    assert [recent.entry(e).num_messages for e in entries] == [1, 3, 1]
    # capacity 2: the oldest was forgotten and is parsed again (a fresh metadata object)
    assert recent.entry(entries[0]).metadata is not recent.entry(entries[0]).metadata
    assert recent.entry(entries[2]).metadata is recent.entry(entries[2]).metadata
