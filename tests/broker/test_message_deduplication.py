"""MessageDeduplication's rules on their own (broker/message_deduplication.py): which sequence id a
message counts under, and the pushed and persisted sequence ids per producer."""

from __future__ import annotations

from magnetar.broker.message_deduplication import (
    MessageDeduplication,
    SequenceKey,
    record_persisted,
    sequence_key,
)
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.protocol import wire
from magnetar.protocol.chunks import chunk_ref


def chunk_metadata(
    chunk_id: int, num_chunks: int, replicated_from: str | None = None
) -> wire.MessageMetadata:
    meta = wire.MessageMetadata(
        producer_name="p",
        sequence_id=7,
        publish_time=1,
        uuid="p-7",
        chunk_id=chunk_id,
        num_chunks_from_msg=num_chunks,
    )
    if replicated_from is not None:
        meta.replicated_from = replicated_from
    return meta


def test_only_the_last_chunk_records_its_sequence_id():
    leading = chunk_metadata(0, 2)
    last = chunk_metadata(1, 2)
    assert sequence_key("p", 7, leading, chunk_ref(leading)) == SequenceKey("p", 7, records=False)
    assert sequence_key("p", 7, last, chunk_ref(last)) == SequenceKey("p", 7)
    assert sequence_key("p", 7, None, None) == SequenceKey("p", 7)


def test_a_replicated_copy_counts_under_its_source_cluster_and_producer():
    meta = wire.MessageMetadata(
        producer_name="orig", sequence_id=3, highest_sequence_id=5, publish_time=1, replicated_from="edge"
    )
    assert sequence_key("replicator", 99, meta, None) == SequenceKey("replicated-from:edge:orig", 5)
    chunk = chunk_metadata(1, 2, replicated_from="edge")  # left to the stored chunks
    assert sequence_key("replicator", 7, chunk, chunk_ref(chunk)) == SequenceKey(
        "replicator", 7, records=False, checks=False
    )


def test_pushed_then_persisted_or_not():
    enabled = [True]
    dedup = MessageDeduplication(lambda: enabled[0], {"p": 4}, StoredChunks())
    assert dedup.last_sequence_id("p") == 4 and dedup.last_sequence_id("q") == -1
    assert dedup.is_duplicate(SequenceKey("p", 4), replicator=False)  # stored already
    assert not dedup.is_duplicate(SequenceKey("p", 5), replicator=False)
    assert dedup.is_duplicate(SequenceKey("p", 5), replicator=False)  # in flight
    dedup.not_persisted(SequenceKey("p", 5))  # the store failed: a resend is taken
    assert not dedup.is_duplicate(SequenceKey("p", 5), replicator=False)
    dedup.persisted(SequenceKey("p", 5))
    assert dedup.last_sequence_id("p") == 5
    assert not dedup.is_duplicate(SequenceKey("p", 6, records=False), replicator=False)
    assert not dedup.is_duplicate(SequenceKey("p", 6), replicator=False)  # a leading chunk did not count
    dedup.not_pushed(SequenceKey("p", 6))  # refused before it was added
    assert not dedup.is_duplicate(SequenceKey("p", 6), replicator=False)
    enabled[0] = False
    assert not dedup.is_duplicate(SequenceKey("p", 1), replicator=False)  # off: everything is stored
    assert dedup.is_duplicate(SequenceKey("p", 1), replicator=True)  # a geo-replicator's always counts
    assert not dedup.is_duplicate(SequenceKey("p", 1, checks=False), replicator=True)


def test_recovery_records_as_publish_does():
    persisted: dict[str, int] = {}
    record_persisted(persisted, SequenceKey("p", 3))
    record_persisted(persisted, SequenceKey("p", 2))  # never goes back
    record_persisted(persisted, SequenceKey("p", 9, records=False))
    assert persisted == {"p": 3}
