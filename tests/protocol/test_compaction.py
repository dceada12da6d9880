"""What compaction reads of an entry, and a batch rewritten with some of its messages compacted out."""

from __future__ import annotations

import pytest

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.compaction import KeyedMessage, entry_facts, rebatch
from magnetar.protocol.compression import decompress
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata, verify_checksum
from tests.compaction_entries import batch, chunk, single


def test_a_single_message_gives_its_key_and_whether_it_is_empty():
    assert entry_facts(single("k", b"v")).messages == (KeyedMessage("k", False),)
    assert entry_facts(single("k", b"")).messages == (KeyedMessage("k", True),)
    assert entry_facts(single(None, b"v")).messages == (KeyedMessage(None, False),)


def test_a_batch_gives_each_message_with_broker_entry_metadata_in_front():
    facts = entry_facts(batch([("a", b"1"), (None, b"2"), ("b", b"")], entry_metadata=True))
    assert facts.batch
    assert facts.messages == (KeyedMessage("a", False), KeyedMessage(None, False), KeyedMessage("b", True))


def test_a_chunk_names_its_message():
    facts = entry_facts(chunk("k", b"xx", 1, 3, "u-1", producer="q"))
    assert facts.chunk is not None and (facts.chunk.uuid, facts.chunk.chunk_id, facts.chunk.last) == (
        "u-1",
        1,
        False,
    )
    assert facts.producer == "q" and not facts.batch


@pytest.mark.parametrize("compression", [wire.NONE, wire.LZ4, wire.ZLIB, wire.ZSTD, wire.SNAPPY])
def test_rebatch_keeps_indexes_and_compacts_out_the_others(compression):
    entry = batch(
        [("a", b"one"), ("b", b"two"), ("c", b"three")], compression=compression, entry_metadata=True
    )
    out = rebatch(entry, frozenset({1}))
    entry_meta, headers_and_payload = split_entry_metadata(out)
    assert entry_meta is not None and entry_meta.index == 9  # the broker's metadata is kept as it was
    verify_checksum(headers_and_payload)
    metadata, payload = parse_metadata(headers_and_payload)
    assert metadata.num_messages_in_batch == 3  # the batch indexes, hence the message ids, stay
    body = decompress(metadata.compression, payload, metadata.uncompressed_size)
    got = [(s.compacted_out, s.partition_key, bytes(p)) for s, p in iter_batch(body, 3)]
    assert got == [(True, "", b""), (False, "b", b"two"), (True, "", b"")]
    assert [m.key for m in entry_facts(out).messages] == [None, "b", None]
