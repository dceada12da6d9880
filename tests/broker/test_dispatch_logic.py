"""Pure dispatch decisions, tested without a network or storage."""

from dataclasses import dataclass

from magnetar.broker.dispatchers.replay_queue import ReplayQueue
from magnetar.broker.dispatchers.routes import ChunkOwners, Route
from magnetar.broker.dispatchers.single_active import choose_active
from magnetar.broker.entries import DispatchEntry, RecentEntries
from magnetar.broker.entry_search import first_true
from magnetar.protocol import wire
from magnetar.protocol.chunks import ChunkRef, chunk_ref
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

    assert first_true(len(values), at_or_after) == 1
    assert len(calls) <= 3
    assert first_true(len(values), lambda i: values[i] >= 100) == len(values)
    assert first_true(0, lambda i: True) == 0


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


# -- routes: chunked messages and keys held back together --------------------------------------------


def test_take_passes_over_what_waits_and_says_which_tags_wait():
    q = ReplayQueue()
    held_chunk = Route(ChunkRef("m1", 1, 3))
    for entry_id, route in [
        (0, Route(ChunkRef("m1", 0, 3))),  # the first chunk: its owner is not chosen yet
        (1, None),  # a whole message
        (2, Route(ChunkRef("m2", 1, 2))),  # m2's owner has no permits
        (3, Route(ChunkRef("m2", 0, 2), key_hash=9)),  # a later entry of key 9 ...
        (4, Route(key_hash=9)),  # ... waits behind it
        (5, held_chunk),
        (6, Route(key_hash=5)),
    ]:
        q.add(Position(1, entry_id), route)

    def waits(route: Route, held: set) -> bool:
        return (route.chunk is not None and route.chunk.uuid == "m2") or not held.isdisjoint(route.tags)

    taken, held, looked_at_all = q.take(10, waits)
    assert taken == [Position(1, e) for e in (0, 1, 5, 6)]
    assert held == {"m2", 9} and looked_at_all
    assert len(q) == 3
    # What stayed keeps its route: taken again once nothing blocks it.
    assert q.take(10, lambda route, held: False) == ([Position(1, e) for e in (2, 3, 4)], set(), True)


def test_positions_taken_come_back_with_their_routes():
    # What a dispatcher took but cannot read now (offloaded, being fetched) goes back as it was.
    q = ReplayQueue()
    route = Route(key_hash=7)
    q.add(Position(1, 0), route)
    q.add(Position(1, 1))
    routes: dict = {}
    taken, _, _ = q.take(5, lambda route, held: False, routes)
    assert taken == [Position(1, 0), Position(1, 1)] and routes == {Position(1, 0): route}
    for position in taken:
        q.add(position, routes.get(position))
    assert q.take(5, lambda route, held: route.key_hash == 7) == ([Position(1, 1)], {7}, True)


def test_take_stops_at_n_and_says_it_did_not_look_at_everything():
    q = ReplayQueue()
    for entry_id in range(5):
        q.add(Position(1, entry_id), Route(key_hash=entry_id))
    taken, held, looked_at_all = q.take(2, lambda route, held: route.key_hash == 0)
    assert taken == [Position(1, 1), Position(1, 2)] and held == {0} and not looked_at_all
    assert q.pop_first(10) == [Position(1, 0), Position(1, 3), Position(1, 4)]


def test_discarded_positions_lose_their_route():
    q = ReplayQueue()
    q.add(Position(1, 1), Route(key_hash=1))
    q.add(Position(1, 2), Route(key_hash=2))
    q.discard(Position(1, 1))
    q.discard_up_to(Position(1, 2))
    q.add(Position(1, 1))  # back without a route: never passed over
    assert q.take(5, lambda route, held: True) == ([Position(1, 1)], set(), True)


def test_chunk_owners_follow_a_message_from_its_first_chunk_to_its_last():
    owners: ChunkOwners[str] = ChunkOwners()
    owners.sent(ChunkRef("m", 1, 3), "late")  # no first chunk seen: claims nothing
    assert owners.owner("m") is None
    owners.sent(ChunkRef("m", 0, 3), "a")
    owners.sent(ChunkRef("m", 1, 3), "a")
    assert owners.owner("m") == "a"
    owners.sent(ChunkRef("m", 2, 3), "a")
    assert owners.owner("m") is None and len(owners) == 0
    owners.sent(ChunkRef("x", 0, 2), "a")
    owners.sent(ChunkRef("y", 0, 2), "b")
    owners.release_consumer("a")
    assert owners.owner("x") is None and owners.owner("y") == "b"
    owners.release("y")
    assert len(owners) == 0


def test_chunk_ref_reads_the_pip_37_fields():
    meta = wire.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)
    assert chunk_ref(meta) is None and chunk_ref(None) is None
    meta.uuid, meta.chunk_id, meta.num_chunks_from_msg = "p-1", 0, 1
    assert chunk_ref(meta) is None, "a message of one chunk is whole"
    meta.num_chunks_from_msg = 3
    assert chunk_ref(meta) == ChunkRef("p-1", 0, 3) and not chunk_ref(meta).last
    meta.chunk_id = 2
    assert chunk_ref(meta).last
