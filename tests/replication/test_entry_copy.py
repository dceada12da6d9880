"""``copy_of``: what a stored entry becomes on the remote, built from real stored bytes (broker
entry metadata in front of the producer's headers and payload), no network."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import wire
from magnetar.protocol.entry import prepend_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.replication.entry_copy import Copy, Skip, Unreplicable, copy_of
from tests.stored_metadata import stored_metadata


def stored(meta: wire.MessageMetadata, payload: bytes = b"p", index: int | None = 99) -> bytes:
    broker = wire.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123)
    if index is not None:
        broker.index = index
    return bytes(prepend_entry_metadata(broker, encode_headers_and_payload(meta, payload)))


def copied(data: bytes, local: str = "edge", remote: str = "centre") -> Copy:
    result = copy_of(data, local, remote)
    assert isinstance(result, Copy), result
    return result


def test_single_message_keeps_its_metadata_and_gets_replicated_from():
    meta = stored_metadata(
        partition_key="k1",
        ordering_key=b"ord",
        event_time=123,
        properties=[wire.KeyValue(key="a", value="b")],
    )
    c = copied(stored(meta, b"hello", index=99))
    assert (c.sequence_id, c.highest_sequence_id, c.num_messages, c.is_chunk) == (99, 99, 1, False)
    assert bytes(c.payload) == b"hello" and c.size == 5
    assert c.metadata.replicated_from == "edge"
    expected = wire.MessageMetadata()
    expected.CopyFrom(meta)
    expected.replicated_from = "edge"
    expected.sequence_id = expected.highest_sequence_id = 99  # the index's, deduplication's
    assert c.metadata == expected  # producer name, key, properties, times... kept


def test_batch_takes_the_index_range_of_its_messages():
    c = copied(
        stored(stored_metadata(num_messages_in_batch=5, compression=wire.LZ4), b"\x01" * 40, index=104)
    )
    assert (c.sequence_id, c.highest_sequence_id, c.num_messages) == (100, 104, 5)
    assert c.metadata.compression == wire.LZ4 and bytes(c.payload) == b"\x01" * 40


def test_first_batch_of_a_topic_starts_at_sequence_id_zero():
    c = copied(stored(stored_metadata(num_messages_in_batch=3), b"xyz", index=2))
    assert (c.sequence_id, c.highest_sequence_id) == (0, 2)


def test_chunk_stays_a_chunk():
    meta = stored_metadata(uuid="sensor-7-41", num_chunks_from_msg=3, total_chunk_msg_size=30, chunk_id=1)
    c = copied(stored(meta, b"c" * 10, index=7))
    assert c.is_chunk and (c.sequence_id, c.highest_sequence_id, c.num_messages) == (7, 7, 1)
    assert (c.metadata.uuid, c.metadata.chunk_id, c.metadata.num_chunks_from_msg) == ("sensor-7-41", 1, 3)
    # every chunk of a message keeps the message's own sequence id (the remote matches chunks by it)
    assert c.metadata.sequence_id == 41 and not c.metadata.HasField("highest_sequence_id")


def test_an_epoch_lifts_the_sequence_ids_above_every_earlier_one():
    first = copied(stored(stored_metadata(), b"x", index=2**40 - 1))
    lifted = copy_of(stored(stored_metadata(), b"x", index=0), "edge", "central", epoch=1)
    assert lifted.sequence_id == lifted.metadata.sequence_id == 2**40 > first.sequence_id


def test_a_single_chunk_message_is_not_a_chunk():
    assert not copied(stored(stored_metadata(num_chunks_from_msg=1, uuid="u"), b"x")).is_chunk


def test_payload_bytes_identical_and_copy_does_not_change_the_stored_entry():
    payload = bytes(range(256)) * 4
    data = stored(stored_metadata(), payload)
    before = bytes(data)
    c = copied(data)
    assert bytes(c.payload) == payload
    assert data == before


def test_message_replicated_from_another_cluster_is_skipped():
    result = copy_of(stored(stored_metadata(replicated_from="other")), "edge", "centre")
    assert isinstance(result, Skip) and "other" in result.why


@pytest.mark.parametrize("replicate_to", [["elsewhere"], ["__local__"], ["edge"]])
def test_replicate_to_without_the_remote_is_skipped(replicate_to):
    result = copy_of(stored(stored_metadata(replicate_to=replicate_to)), "edge", "centre")
    assert isinstance(result, Skip)


def test_replicate_to_naming_the_remote_is_copied():
    c = copied(stored(stored_metadata(replicate_to=["elsewhere", "centre"]), b"p"))
    assert list(c.metadata.replicate_to) == ["elsewhere", "centre"]


def test_skip_does_not_need_an_index():
    result = copy_of(stored(stored_metadata(replicated_from="other"), index=None), "edge", "centre")
    assert isinstance(result, Skip)


def test_no_index_is_unreplicable():
    with pytest.raises(Unreplicable, match="index"):
        copy_of(stored(stored_metadata(), index=None), "edge", "centre")


def test_no_broker_entry_metadata_at_all_is_unreplicable():
    with pytest.raises(Unreplicable, match="index"):
        copy_of(encode_headers_and_payload(stored_metadata(), b"p"), "edge", "centre")


@pytest.mark.parametrize(
    "damage",
    [
        lambda data: data[:8],  # cut inside the broker entry metadata
        lambda data: data[: len(data) - len(b"hello") - 5],  # cut inside the message metadata
        lambda data: data[:6] + b"\xff" + data[7:],  # broker entry metadata not protobuf
    ],
)
def test_damaged_metadata_is_unreplicable(damage):
    data = stored(stored_metadata(), b"hello")
    with pytest.raises(Unreplicable):
        copy_of(damage(data), "edge", "centre")


def test_message_metadata_that_is_not_protobuf_is_unreplicable():
    garbage = b"\x00\x00\x00\x03\xff\xff\xff" + b"payload"  # no checksum, a 3-byte metadata
    data = bytes(prepend_entry_metadata(wire.BrokerEntryMetadata(index=5), garbage))
    with pytest.raises(Unreplicable):
        copy_of(data, "edge", "centre")


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)


@given(
    producer=names,
    sequence_id=st.integers(0, 2**63),
    publish_time=st.integers(0, 2**63),
    key=st.none() | names,
    ordering_key=st.none() | st.binary(max_size=16),
    event_time=st.integers(0, 2**63),
    properties=st.lists(st.tuples(names, names), max_size=4),
    batch=st.integers(1, 50),
    schema_version=st.binary(max_size=8),
    payload=st.binary(max_size=300),
    index=st.integers(50, 2**40 - 1),
)
def test_random_metadata_survives_the_copy(
    producer,
    sequence_id,
    publish_time,
    key,
    ordering_key,
    event_time,
    properties,
    batch,
    schema_version,
    payload,
    index,
):
    meta = wire.MessageMetadata(
        producer_name=producer,
        sequence_id=sequence_id,
        publish_time=publish_time,
        event_time=event_time,
        num_messages_in_batch=batch,
        schema_version=schema_version,
    )
    if key is not None:
        meta.partition_key = key
    if ordering_key is not None:
        meta.ordering_key = ordering_key
    meta.properties.extend(wire.KeyValue(key=k, value=v) for k, v in properties)
    c = copied(stored(meta, payload, index=index), local="edge-1")
    expected = wire.MessageMetadata()
    expected.CopyFrom(meta)
    expected.replicated_from = "edge-1"
    expected.sequence_id, expected.highest_sequence_id = index - batch + 1, index
    assert c.metadata == expected
    assert c.metadata.SerializeToString(deterministic=True) == expected.SerializeToString(deterministic=True)
    assert bytes(c.payload) == payload
    assert (c.sequence_id, c.highest_sequence_id, c.num_messages) == (index - batch + 1, index, batch)
