"""The chunks a topic stored, recognised when a producer sends them again: pure rules, no storage."""

from __future__ import annotations

import json

from magnetar.broker.stored_chunks import StoredChunks
from magnetar.protocol import wire
from magnetar.protocol.chunks import chunk_ref
from magnetar.storage.position import Position


def chunk_meta(chunk_id: int, num_chunks: int = 4, uuid: str = "cam-7", **fields) -> wire.MessageMetadata:
    meta = wire.MessageMetadata(
        producer_name=fields.pop("producer", "cam"),
        sequence_id=fields.pop("sequence_id", 7),
        publish_time=fields.pop("publish_time", 1_700_000_000_000),
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=num_chunks,
        total_chunk_msg_size=fields.pop("total", 4000),
    )
    assert not fields
    return meta


class Answers:
    """Callbacks that record what a send was answered with."""

    def __init__(self) -> None:
        self.got: list[tuple[Position | None, Exception | None]] = []

    def __call__(self, position, exc) -> None:
        self.got.append((position, exc))


def store(chunks: StoredChunks, meta: wire.MessageMetadata, position: Position) -> None:
    """A new chunk through both steps: announced, then durable."""
    ref = chunk_ref(meta)
    assert not chunks.answer_resend(meta, ref, Answers())
    record = chunks.storing(meta, ref)
    chunks.stored(record, ref, position)


def test_a_chunk_sent_again_is_answered_with_the_stored_one():
    chunks = StoredChunks()
    for i in range(3):
        store(chunks, chunk_meta(i), Position(1, 10 + i))
    answers = Answers()
    meta = chunk_meta(1)
    assert chunks.answer_resend(meta, chunk_ref(meta), answers)
    assert answers.got == [(Position(1, 11), None)]
    new = chunk_meta(3)
    assert not chunks.answer_resend(new, chunk_ref(new), Answers()), "chunk 3 was never stored"


def copy_while_storing(chunks: StoredChunks, meta: wire.MessageMetadata):
    """A chunk being stored, and a copy of it sent meanwhile: (its ChunkRef, record, the copy's answers)."""
    ref = chunk_ref(meta)
    record = chunks.storing(meta, ref)
    waiting = Answers()
    assert chunks.answer_resend(meta, ref, waiting)
    assert waiting.got == []
    return ref, record, waiting


def test_a_copy_sent_while_the_first_is_being_stored_gets_its_outcome():
    chunks = StoredChunks()
    ref, record, waiting = copy_while_storing(chunks, chunk_meta(0))
    chunks.stored(record, ref, Position(2, 0))
    assert waiting.got == [(Position(2, 0), None)]


def test_a_failed_store_fails_the_waiting_copies_and_is_forgotten():
    chunks = StoredChunks()
    meta = chunk_meta(0)
    ref, record, waiting = copy_while_storing(chunks, meta)
    error = OSError("disk full")
    chunks.stored(record, ref, None, error)
    assert waiting.got == [(None, error)]
    assert chunks.chunks == 0
    assert not chunks.answer_resend(meta, ref, Answers()), "the next copy is stored"


def test_another_message_under_the_same_uuid_is_not_taken_for_the_old_one():
    """A producer restarted under its name starts its sequence ids (and uuids) again."""
    chunks = StoredChunks()
    store(chunks, chunk_meta(0, publish_time=1), Position(1, 0))
    for differs in ({"publish_time": 2}, {"total": 5000}, {"sequence_id": 8}, {"producer": "other"}):
        meta = chunk_meta(0, **{"publish_time": 1, **differs})
        assert not chunks.answer_resend(meta, chunk_ref(meta), Answers()), differs
    replacing = chunk_meta(0, publish_time=2)
    store(chunks, replacing, Position(1, 5))
    old = chunk_meta(0, publish_time=1)
    assert not chunks.answer_resend(old, chunk_ref(old), Answers()), "replaced"
    assert chunks.chunks == 1


def test_the_oldest_messages_are_forgotten_past_the_bound():
    chunks = StoredChunks(max_chunks=6)
    for m in range(4):
        for i in range(2):
            store(chunks, chunk_meta(i, num_chunks=2, uuid=f"cam-{m}", sequence_id=m), Position(1, 2 * m + i))
    assert chunks.chunks == 6
    first = chunk_meta(0, num_chunks=2, uuid="cam-0", sequence_id=0)
    assert not chunks.answer_resend(first, chunk_ref(first), Answers())
    last = chunk_meta(1, num_chunks=2, uuid="cam-3", sequence_id=3)
    assert chunks.answer_resend(last, chunk_ref(last), Answers())


def test_a_record_forgotten_while_its_chunk_is_stored_still_answers_its_copies():
    chunks = StoredChunks(max_chunks=1)
    ref, record, waiting = copy_while_storing(chunks, chunk_meta(0, uuid="old"))
    store(chunks, chunk_meta(0, uuid="new"), Position(1, 1))  # pushes "old" out
    chunks.stored(record, ref, Position(1, 0))
    assert waiting.got == [(Position(1, 0), None)]
    assert chunks.chunks == 1


def test_the_snapshot_restores_every_position_and_packs_runs():
    chunks = StoredChunks()
    positions = [Position(1, 0), Position(1, 1), Position(1, 2), Position(1, 7), Position(2, 0)]
    for i, position in enumerate(positions):
        store(chunks, chunk_meta(i, num_chunks=6), position)
    snapshot = json.loads(json.dumps(chunks.snapshot()))
    assert snapshot == [
        ["cam", "cam-7", 6, 4000, 1_700_000_000_000, 7, [[0, 1, 0, 3], [3, 1, 7, 1], [4, 2, 0, 1]]]
    ]
    restored = StoredChunks()
    restored.restore(snapshot)
    assert restored.chunks == 5
    for i, position in enumerate(positions):
        answers = Answers()
        meta = chunk_meta(i, num_chunks=6)
        assert restored.answer_resend(meta, chunk_ref(meta), answers)
        assert answers.got == [(position, None)]


def test_recovery_keeps_the_first_copy_of_each_chunk():
    chunks = StoredChunks()
    chunks.recover(chunk_meta(0), chunk_ref(chunk_meta(0)), Position(1, 0))
    chunks.recover(chunk_meta(0), chunk_ref(chunk_meta(0)), Position(1, 9))
    answers = Answers()
    chunks.answer_resend(chunk_meta(0), chunk_ref(chunk_meta(0)), answers)
    assert answers.got == [(Position(1, 0), None)] and chunks.chunks == 1
