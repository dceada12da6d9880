"""Batches: ``[u32 size][SingleMessageMetadata][payload]`` repeated, one entry."""

from __future__ import annotations

import struct

import lz4.block
import pytest

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import encode_batch, iter_batch, iter_batch_reused
from magnetar.protocol.headers import parse_metadata, verify_checksum

from .support import client_send_payload


def singles(n: int) -> list[tuple[wire.SingleMessageMetadata, bytes]]:
    return [
        (
            wire.SingleMessageMetadata(
                partition_key=f"k{i}", sequence_id=i, properties=[wire.KeyValue(key="i", value=str(i))]
            ),
            f"m{i}".encode() * i,
        )
        for i in range(n)
    ]


def test_encode_then_iterate_round_trips():
    messages = singles(5)
    out = list(iter_batch(encode_batch(messages), 5))
    assert [(single, bytes(payload)) for single, payload in out] == messages
    assert [single.payload_size for single, _ in out] == [len(p) for _, p in messages]


def test_encode_layout_is_byte_exact():
    single = wire.SingleMessageMetadata(sequence_id=3)
    raw = wire.SingleMessageMetadata(sequence_id=3, payload_size=2).SerializeToString()
    assert encode_batch([(single, b"ab")]) == struct.pack(">I", len(raw)) + raw + b"ab"


def test_client_batch_iterates_in_order():
    data = client_send_payload("SEND-batched")
    verify_checksum(data)
    meta, payload = parse_metadata(data)
    assert meta.num_messages_in_batch == 3
    out = list(iter_batch(payload, meta.num_messages_in_batch))
    assert [bytes(p) for _, p in out] == [b"batched-0", b"batched-1", b"batched-2"]
    assert [s.partition_key for s, _ in out] == ["k0", "k1", "k2"]
    assert [[(kv.key, kv.value) for kv in s.properties] for s, _ in out] == [
        [("i", "0")],
        [("i", "1")],
        [("i", "2")],
    ]


def test_client_compressed_batch_iterates_after_decompression():
    meta, payload = parse_metadata(client_send_payload("SEND-lz4"))
    assert meta.compression == wire.LZ4
    plain = lz4.block.decompress(bytes(payload), uncompressed_size=meta.uncompressed_size)
    [(_, message)] = iter_batch(plain, meta.num_messages_in_batch)
    assert bytes(message) == b"squeeze me " * 20


def test_zero_count_yields_nothing():
    assert list(iter_batch(encode_batch(singles(2)), 0)) == []


def test_fewer_messages_than_declared():
    with pytest.raises(ProtocolError, match="before its declared message count"):
        list(iter_batch(encode_batch(singles(2)), 3))


def test_single_metadata_running_past_the_end():
    with pytest.raises(ProtocolError, match="runs past the end"):
        list(iter_batch(struct.pack(">I", 50) + b"\x18\x00", 1))


def test_payload_running_past_the_end():
    batch = encode_batch(singles(3))
    with pytest.raises(ProtocolError, match="runs past the end"):
        list(iter_batch(batch[:-1], 3))


def test_negative_payload_size():
    raw = wire.SingleMessageMetadata(payload_size=-1).SerializeToString()
    with pytest.raises(ProtocolError, match="runs past the end"):
        list(iter_batch(struct.pack(">I", len(raw)) + raw + b"xyz", 1))


def test_malformed_single_metadata():
    with pytest.raises(ProtocolError, match="malformed"):
        list(iter_batch(struct.pack(">I", 2) + b"\xff\xff", 1))


def test_single_metadata_missing_payload_size():
    raw = wire.SingleMessageMetadata(partition_key="k").SerializePartialToString()
    with pytest.raises(ProtocolError, match="missing required"):
        list(iter_batch(struct.pack(">I", len(raw)) + raw + b"payload", 1))


def test_reused_metadata_reads_as_iter_batch():
    batch = encode_batch(singles(6))
    fresh = [(s.SerializeToString(), bytes(p)) for s, p in iter_batch(batch, 6)]
    reused = [(s.SerializeToString(), bytes(p)) for s, p in iter_batch_reused(batch, 6)]
    assert reused == fresh and len({s for s, _ in reused}) == 6


_MISSING_SIZE = wire.SingleMessageMetadata(partition_key="k").SerializePartialToString()
_NEGATIVE_SIZE = wire.SingleMessageMetadata(payload_size=-1).SerializeToString()


@pytest.mark.parametrize(
    ("data", "count", "error"),
    [
        (encode_batch(singles(2)), 3, "before its declared message count"),
        (struct.pack(">I", 50) + b"\x18\x00", 1, "runs past the end"),
        (encode_batch(singles(3))[:-1], 3, "runs past the end"),
        (struct.pack(">I", len(_NEGATIVE_SIZE)) + _NEGATIVE_SIZE + b"xyz", 1, "runs past the end"),
        (struct.pack(">I", 2) + b"\xff\xff", 1, "malformed"),
        (struct.pack(">I", len(_MISSING_SIZE)) + _MISSING_SIZE + b"payload", 1, "missing required"),
    ],
)
def test_reused_metadata_refuses_what_iter_batch_refuses(data, count, error):
    for iterate in (iter_batch, iter_batch_reused):
        with pytest.raises(ProtocolError, match=error):
            list(iterate(data, count))
