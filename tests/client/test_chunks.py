"""The chunk-assembly state machine, fed crafted sequences: every rule of issue 4, no network."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.client.chunks import Chunk, ChunkAssembler, ChunkOutcome
from magnetar.client.message import MessageId

NOW = 1_000_000


class Producer:
    """Crafts the chunks a producer would send for one message, at consecutive entries."""

    def __init__(
        self, uuid: str, data: bytes, num_chunks: int, first_entry: int = 0, publish_time: int = NOW
    ):
        self.uuid = uuid
        self.data = data
        self.num_chunks = num_chunks
        self.first_entry = first_entry
        self.publish_time = publish_time
        size = -(-len(data) // num_chunks)
        self.parts = [data[i * size : (i + 1) * size] for i in range(num_chunks)]

    def chunk(self, chunk_id: int, entry: int | None = None, **overrides) -> Chunk:
        fields = dict(
            uuid=self.uuid,
            chunk_id=chunk_id,
            num_chunks=self.num_chunks,
            total_size=len(self.data),
            message_id=MessageId(-1, 1, self.first_entry + chunk_id if entry is None else entry),
            payload=self.parts[chunk_id] if chunk_id < len(self.parts) else b"",
            publish_time=self.publish_time,
        )
        fields.update(overrides)
        return Chunk(**fields)

    def all(self) -> list[Chunk]:
        return [self.chunk(i) for i in range(self.num_chunks)]


def entry(e: int) -> MessageId:
    return MessageId(-1, 1, e)


def feed(assembler: ChunkAssembler, chunks: list[Chunk], now: int = NOW) -> list[ChunkOutcome]:
    return [assembler.receive(c, now) for c in chunks]


def completed(outcomes: list[ChunkOutcome]) -> list[bytes]:
    return [bytes(o.completed.payload) for o in outcomes if o.completed is not None]


def permits(outcomes: list[ChunkOutcome]) -> int:
    return sum(o.permits for o in outcomes)


def acks(outcomes: list[ChunkOutcome]) -> list[MessageId]:
    return [i for o in outcomes for i in o.ack]


def redeliveries(outcomes: list[ChunkOutcome]) -> list[MessageId]:
    return [i for o in outcomes for i in o.redeliver]


# --- the happy path -------------------------------------------------------------------------------


def test_in_order_chunks_assemble_into_the_original_bytes():
    p = Producer("p-0", bytes(range(256)) * 40, num_chunks=4)
    out = feed(ChunkAssembler(), p.all())
    assert completed(out) == [p.data]
    assert [o.completed is None for o in out] == [True, True, True, False]
    assert out[-1].completed.chunk_ids == [entry(0), entry(1), entry(2), entry(3)]
    assert acks(out) == [] and redeliveries(out) == []


def test_buffer_is_preallocated_to_the_total_size_at_the_first_chunk():
    p = Producer("p-0", b"x" * 1000, num_chunks=4)
    asm = ChunkAssembler()
    asm.receive(p.chunk(0), NOW)
    assert asm.pending == 1 and asm.pending_bytes == 1000


def test_every_chunk_but_the_completing_one_gives_its_permit_back_at_once():
    p = Producer("p-0", b"abcdefgh", num_chunks=4)
    out = feed(ChunkAssembler(), p.all())
    assert [o.permits for o in out] == [1, 1, 1, 0]


def test_interleaved_producers_assemble_on_one_consumer():
    producers = [Producer(f"prod{k}-7", bytes([k]) * (300 + k), num_chunks=3 + k) for k in range(3)]
    stream, next_entry = [], 0
    queues = [p.all() for p in producers]
    rng = random.Random(4)
    while any(queues):
        q = rng.choice([q for q in queues if q])
        c = q.pop(0)
        stream.append(Chunk(**{**_fields(c), "message_id": entry(next_entry)}))
        next_entry += 1
    asm = ChunkAssembler()
    out = feed(asm, stream)
    assert sorted(completed(out)) == sorted(p.data for p in producers)
    assert asm.pending == 0
    assert permits(out) == len(stream) - 3


def _fields(c: Chunk) -> dict:
    return {name: getattr(c, name) for name in Chunk.__slots__}


def test_single_chunk_message_completes_immediately():
    p = Producer("p-1", b"tiny", num_chunks=1)
    out = feed(ChunkAssembler(), p.all())
    assert completed(out) == [b"tiny"] and permits(out) == 0


def test_an_empty_message_in_chunks_completes():
    p = Producer("p-1", b"", num_chunks=2)
    out = feed(ChunkAssembler(), p.all())
    assert completed(out) == [b""]


# --- discarded chunks ------------------------------------------------------------------------------


def test_chunk_for_unknown_uuid_is_discarded_and_redelivered_later():
    p = Producer("p-0", b"abcdef", num_chunks=3)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(1), p.chunk(2)])
    assert completed(out) == [] and asm.pending == 0
    assert redeliveries(out) == [entry(1), entry(2)] and acks(out) == []
    assert permits(out) == 2


def test_stale_chunk_for_unknown_uuid_is_acknowledged():
    p = Producer("p-0", b"abcdef", num_chunks=3, publish_time=NOW - 61_000)
    out = feed(ChunkAssembler(expire_ms=60_000), [p.chunk(2)])
    assert acks(out) == [entry(2)] and redeliveries(out) == [] and permits(out) == 1


def test_chunk_id_not_below_num_chunks_is_discarded():
    p = Producer("p-0", b"abcdef", num_chunks=3)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1), p.chunk(3, entry=9), p.chunk(2)])
    assert completed(out) == [p.data]
    assert redeliveries(out) == [entry(9)]
    assert permits(out) == 3


def test_malformed_chunk_fields_are_discarded():
    p = Producer("p-0", b"abcdef", num_chunks=3)
    asm = ChunkAssembler()
    bad = [
        p.chunk(0, num_chunks=0, entry=10),
        p.chunk(-1, entry=11),
        p.chunk(0, uuid="", entry=12),
        p.chunk(0, total_size=1, entry=13),  # its payload cannot fit
    ]
    out = feed(asm, bad)
    assert asm.pending == 0 and completed(out) == []
    assert redeliveries(out) == [entry(10), entry(11), entry(12), entry(13)]
    assert permits(out) == 4


def test_total_size_above_the_limit_is_not_preallocated():
    p = Producer("p-0", b"a" * 100, num_chunks=2)
    asm = ChunkAssembler(max_message_bytes=50)
    out = feed(asm, [p.chunk(0)])
    assert asm.pending == 0 and redeliveries(out) == [entry(0)]


def test_gap_discards_the_chunk_and_its_message():
    p = Producer("p-0", b"abcdefgh", num_chunks=4)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1), p.chunk(3)])
    assert asm.pending == 0 and completed(out) == []
    assert redeliveries(out) == [entry(0), entry(1), entry(3)]
    assert permits(out) == 3
    # The missing chunk arriving late is now an orphan, discarded too.
    late = feed(asm, [p.chunk(2)])
    assert redeliveries(late) == [entry(2)] and permits(late) == 1


def test_stale_gap_is_acknowledged():
    p = Producer("p-0", b"abcdefgh", num_chunks=4, publish_time=NOW - 120_000)
    out = feed(ChunkAssembler(expire_ms=60_000), [p.chunk(0), p.chunk(2)])
    assert acks(out) == [entry(0), entry(2)]


def test_chunk_disagreeing_on_num_chunks_breaks_the_message():
    p = Producer("p-0", b"abcdefgh", num_chunks=4)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1, num_chunks=5)])
    assert asm.pending == 0 and redeliveries(out) == [entry(0), entry(1)]


def test_chunk_overflowing_the_buffer_breaks_the_message():
    p = Producer("p-0", b"abcdefgh", num_chunks=4)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1, payload=b"0123456789")])
    assert asm.pending == 0 and completed(out) == []
    assert redeliveries(out) == [entry(0), entry(1)]


def test_chunks_shorter_than_announced_never_complete():
    p = Producer("p-0", b"abcdefgh", num_chunks=2)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1, payload=b"x")])
    assert completed(out) == [] and asm.pending == 0
    assert acks(out) == [entry(0), entry(1)]
    assert permits(out) == 2


# --- restarts and duplicates -----------------------------------------------------------------------


def test_redelivered_chunk_0_restarts_the_message_without_acks():
    p = Producer("p-0", b"abcdefghi", num_chunks=3)
    asm = ChunkAssembler()
    # 0, 1 arrive; then the broker redelivers from 0 (same entries).
    out = feed(asm, [p.chunk(0), p.chunk(1), p.chunk(0), p.chunk(1), p.chunk(2)])
    assert completed(out) == [p.data]
    assert acks(out) == [] and redeliveries(out) == []
    assert out[-1].completed.chunk_ids == [entry(0), entry(1), entry(2)]
    assert permits(out) == 4


def test_resent_chunk_0_at_new_entries_restarts_and_acks_the_old_chunks():
    p = Producer("p-0", b"abcdefghi", num_chunks=3)
    again = Producer("p-0", b"abcdefghi", num_chunks=3, first_entry=10)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1), *again.all()])
    assert completed(out) == [p.data]
    assert acks(out) == [entry(0), entry(1)]
    assert out[-1].completed.chunk_ids == [entry(10), entry(11), entry(12)]


def test_duplicate_middle_chunk_of_the_same_entry_is_ignored():
    p = Producer("p-0", b"abcdefghijkl", num_chunks=4)
    asm = ChunkAssembler()
    out = feed(asm, [p.chunk(0), p.chunk(1), p.chunk(2), p.chunk(1), p.chunk(3)])
    assert completed(out) == [p.data]
    assert acks(out) == [] and redeliveries(out) == []
    assert out[-1].completed.chunk_ids == [entry(0), entry(1), entry(2), entry(3)]
    assert permits(out) == 4


def test_duplicate_middle_chunk_at_a_new_entry_is_ignored_and_acked():
    p = Producer("p-0", b"abcdefghijkl", num_chunks=4)
    asm = ChunkAssembler()
    out = feed(
        asm, [p.chunk(0), p.chunk(1), p.chunk(2), p.chunk(1, entry=20), p.chunk(2, entry=21), p.chunk(3)]
    )
    assert completed(out) == [p.data]
    assert acks(out) == [entry(20), entry(21)]


def test_a_resend_overlapping_what_was_stored_assembles_once():
    """The topic of a producer that resent after a broker restart: chunk ids 0..41, then 20..69."""
    p = Producer("p-0", bytes(range(70)) * 3, num_chunks=70)
    first = [p.chunk(i) for i in range(42)]
    resent = [p.chunk(i, entry=100 + i) for i in range(20, 70)]
    asm = ChunkAssembler()
    out = feed(asm, first + resent)
    assert completed(out) == [p.data]
    assert acks(out) == [entry(100 + i) for i in range(20, 42)], "the copies, never the originals"
    assert out[-1].completed.chunk_ids == [entry(i) for i in range(42)] + [
        entry(100 + i) for i in range(42, 70)
    ]
    assert permits(out) == len(first + resent) - 1 and asm.pending == 0


def test_copies_stored_after_a_completed_message_are_acknowledged():
    p = Producer("p-0", b"abcdefghi", num_chunks=3)
    asm = ChunkAssembler()
    out = feed(asm, [*p.all(), p.chunk(1, entry=7), p.chunk(2, entry=8)])
    assert completed(out) == [p.data]
    assert acks(out) == [entry(7), entry(8)] and redeliveries(out) == []
    assert permits(out) == 4


def test_an_original_chunk_of_a_completed_message_sent_again_is_only_skipped():
    """The application holds the message: its acknowledgement covers the chunk."""
    p = Producer("p-0", b"abcdefghi", num_chunks=3, first_entry=5)
    asm = ChunkAssembler()
    out = feed(asm, [*p.all(), p.chunk(2)])
    assert completed(out) == [p.data]
    assert acks(out) == [] and redeliveries(out) == [] and permits(out) == 3


def test_only_the_last_completed_messages_are_remembered():
    producers = [Producer(f"p-{k}", b"abcdef", num_chunks=2, first_entry=10 * k) for k in range(3)]
    asm = ChunkAssembler(max_completed=2)
    feed(asm, [c for p in producers for c in p.all()])
    late_copies = [p.chunk(1, entry=100 + k) for k, p in enumerate(producers)]
    out = feed(asm, late_copies)
    assert acks(out) == [entry(101), entry(102)]
    assert redeliveries(out) == [entry(100)], "forgotten: an unknown chunk, redelivered later"


# --- the pending limit -----------------------------------------------------------------------------


def test_past_max_pending_the_oldest_is_dropped_and_redelivered():
    producers = [Producer(f"p{k}", bytes([65 + k]) * 6, num_chunks=3, first_entry=10 * k) for k in range(3)]
    asm = ChunkAssembler(max_pending=2)
    out = feed(
        asm, [producers[0].chunk(0), producers[0].chunk(1), producers[1].chunk(0), producers[2].chunk(0)]
    )
    assert asm.pending_uuids() == ["p1", "p2"]
    assert redeliveries(out) == [entry(0), entry(1)] and acks(out) == []
    assert permits(out) == 4
    # The dropped message's remaining chunk is now an orphan.
    rest = feed(asm, [producers[0].chunk(2), producers[1].chunk(1), producers[1].chunk(2)])
    assert completed(rest) == [producers[1].data]
    assert redeliveries(rest) == [entry(2)]


def test_past_max_pending_the_oldest_is_acked_when_configured():
    producers = [Producer(f"p{k}", b"z" * 6, num_chunks=3, first_entry=10 * k) for k in range(3)]
    asm = ChunkAssembler(max_pending=2, auto_ack_oldest=True)
    out = feed(asm, [p.chunk(0) for p in producers])
    assert acks(out) == [entry(0)] and redeliveries(out) == []
    assert asm.pending_uuids() == ["p1", "p2"]


def test_max_pending_zero_means_unbounded():
    producers = [Producer(f"p{k}", b"z" * 6, num_chunks=3, first_entry=10 * k) for k in range(50)]
    asm = ChunkAssembler(max_pending=0)
    feed(asm, [p.chunk(0) for p in producers])
    assert asm.pending == 50


def test_completing_messages_frees_pending_slots():
    asm = ChunkAssembler(max_pending=1)
    for k in range(5):
        p = Producer(f"p{k}", b"q" * 9, num_chunks=3, first_entry=10 * k)
        out = feed(asm, p.all())
        assert completed(out) == [p.data] and acks(out) == [] and redeliveries(out) == []
    assert asm.pending == 0


# --- expiry ----------------------------------------------------------------------------------------


def test_idle_context_expires_and_its_chunks_are_acked():
    p = Producer("p-0", b"abcdefghi", num_chunks=3)
    asm = ChunkAssembler(expire_ms=1000)
    feed(asm, [p.chunk(0)], now=NOW)
    feed(asm, [p.chunk(1)], now=NOW + 500)
    assert asm.next_expiry_ms() == NOW + 1500
    assert asm.expire(NOW + 1500).ack == []
    out = asm.expire(NOW + 1501)
    assert out.ack == [entry(0), entry(1)] and out.permits == 0 and out.completed is None
    assert asm.pending == 0 and asm.next_expiry_ms() is None
    # The last chunk arriving afterwards is an orphan, stale by its publish time.
    late = asm.receive(p.chunk(2), NOW + 1501)
    assert late.ack == [entry(2)] and late.permits == 1


def test_expiry_only_drops_the_idle_ones():
    a = Producer("a", b"a" * 4, num_chunks=2, first_entry=0)
    b = Producer("b", b"b" * 4, num_chunks=2, first_entry=10)
    asm = ChunkAssembler(expire_ms=100)
    asm.receive(a.chunk(0), NOW)
    asm.receive(b.chunk(0), NOW + 80)
    assert asm.expire(NOW + 150).ack == [entry(0)]
    assert asm.pending_uuids() == ["b"]
    assert bytes(asm.receive(b.chunk(1), NOW + 160).completed.payload) == b.data


def test_expiry_disabled():
    p = Producer("p-0", b"abcdefghi", num_chunks=3, publish_time=0)
    asm = ChunkAssembler(expire_ms=0)
    asm.receive(p.chunk(0), NOW)
    assert asm.expire(NOW * 10).ack == [] and asm.pending == 1
    assert asm.next_expiry_ms() is None
    assert asm.receive(p.chunk(2, uuid="other"), NOW).redeliver == [entry(2)]


def test_clear_forgets_everything():
    p = Producer("p-0", b"abcdefghi", num_chunks=3)
    asm = ChunkAssembler()
    feed(asm, [p.chunk(0), p.chunk(1)])
    asm.clear()
    assert asm.pending == 0
    out = feed(asm, p.all())
    assert completed(out) == [p.data]


# --- properties ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    messages=st.lists(
        st.tuples(st.binary(min_size=0, max_size=64), st.integers(min_value=1, max_value=6)),
        min_size=1,
        max_size=6,
    ),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_any_interleaving_of_in_order_streams_assembles_every_message(messages, seed):
    producers = [Producer(f"u{k}", data, n) for k, (data, n) in enumerate(messages)]
    queues = [p.all() for p in producers]
    rng = random.Random(seed)
    stream = []
    while any(queues):
        q = rng.choice([q for q in queues if q])
        stream.append(q.pop(0))
    asm = ChunkAssembler(max_pending=0)
    out = feed(asm, stream)
    assert sorted(completed(out)) == sorted(p.data for p in producers)
    assert permits(out) == len(stream) - len(producers)
    assert acks(out) == [] and redeliveries(out) == [] and asm.pending == 0


@settings(max_examples=100, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3),  # which uuid
            st.integers(min_value=-1, max_value=5),  # chunk id
            st.integers(min_value=0, max_value=40),  # entry
        ),
        max_size=40,
    ),
    max_pending=st.integers(min_value=0, max_value=3),
)
def test_garbage_never_leaks_a_permit_or_exceeds_the_limit(ops, max_pending):
    asm = ChunkAssembler(max_pending=max_pending)
    for uuid_no, chunk_id, e in ops:
        out = asm.receive(
            Chunk(f"u{uuid_no}", chunk_id, 4, 8, entry(e), b"ab", NOW),
            NOW,
        )
        assert out.permits == (0 if out.completed is not None else 1)
        if max_pending:
            assert asm.pending <= max_pending
        if out.completed is not None:
            assert len(out.completed.payload) == 8 and len(out.completed.chunk_ids) == 4


def test_assembling_a_large_message_peaks_near_twice_its_size():
    import tracemalloc

    from magnetar.client.decode import uncompressed_payload
    from magnetar.protocol import pulsar_wire_pb2 as wire

    size, chunk = 40 * 1024 * 1024, 5 * 1024 * 1024
    tracemalloc.start()
    try:
        asm = ChunkAssembler()
        completed_payload = None
        for i in range(size // chunk):
            frame = bytes(chunk)  # what the connection hands over for one chunk
            out = asm.receive(Chunk("u", i, size // chunk, size, entry(i), memoryview(frame)), NOW)
            del frame
            if out.completed is not None:
                completed_payload = uncompressed_payload(wire.MessageMetadata(), out.completed.payload)
                del out
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert completed_payload is not None and len(completed_payload) == size
    assert peak < 2 * size + 2 * chunk, f"peak {peak / size:.2f}x the message size"


# --- progress: what the Spark range reads stop on ----------------------------------------------------
def test_the_newest_chunk_taken_in_counts_discarded_chunks_and_survives_clear():
    assembler = ChunkAssembler()
    assert assembler.newest_chunk is None
    a = Producer("a", b"abcdef", 3, first_entry=10)
    feed(assembler, [a.chunk(0)])
    assert assembler.newest_chunk == entry(10)
    orphan = Producer("orphan", b"xyz", 3, first_entry=20)
    (outcome,) = feed(assembler, [orphan.chunk(1, entry=21)])  # unknown uuid: discarded
    assert outcome.permits == 1 and outcome.completed is None
    assert assembler.newest_chunk == entry(21)
    feed(assembler, [a.chunk(1)])  # older than the newest: it stays
    assert assembler.newest_chunk == entry(21)
    assembler.clear()
    assert assembler.newest_chunk == entry(21)


def test_progress_names_the_first_chunk_of_each_message_not_handed_out():
    from magnetar.client.message import ChunkMessageId

    assembler = ChunkAssembler()
    done = Producer("done", b"abcd", 2, first_entry=0)
    (_, last) = feed(assembler, done.all())
    queued = ChunkMessageId(last.completed.chunk_ids)
    open_ = Producer("open", b"abcdef", 3, first_entry=2)
    feed(assembler, [open_.chunk(0), open_.chunk(1)])

    progress = assembler.progress([queued, entry(9)])
    assert progress.newest_chunk == entry(3)
    assert progress.unfinished_first_chunks == (entry(2), entry(0))  # being assembled, then queued
    assert not progress.queue_empty

    progress = assembler.progress([])
    assert progress.unfinished_first_chunks == (entry(2),)
    assert progress.queue_empty
    feed(assembler, [open_.chunk(2)])
    assert assembler.progress([]).unfinished_first_chunks == ()
