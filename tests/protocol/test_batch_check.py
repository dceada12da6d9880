"""check_message: the broker's one look inside a batch before storing it (pure, no network)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import InvalidMessage, check_message, encode_batch, iter_batch
from magnetar.protocol.compression import compress, decompress
from magnetar.protocol.headers import parse_metadata

from .support import client_send_payload

MAX_MESSAGES = 1000
MAX_SIZE = 5 * 1024 * 1024


def singles(n: int) -> list[tuple[wire.SingleMessageMetadata, bytes]]:
    return [(wire.SingleMessageMetadata(sequence_id=i, partition_key=f"k{i}"), b"m%d" % i) for i in range(n)]


def meta(count: int | None, **fields) -> wire.MessageMetadata:
    metadata = wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, **fields)
    if count is not None:
        metadata.num_messages_in_batch = count
    return metadata


def check(metadata: wire.MessageMetadata, payload: bytes) -> None:
    check_message(metadata, payload, MAX_MESSAGES, MAX_SIZE)


@pytest.mark.parametrize("name", ["SEND-batched", "SEND-lz4", "SEND-plain"])
def test_official_client_messages_pass(name):
    metadata, payload = parse_metadata(client_send_payload(name))
    check(metadata, payload)


@pytest.mark.parametrize("kind", [wire.NONE, wire.LZ4, wire.ZLIB, wire.ZSTD, wire.SNAPPY])
def test_honest_batches_pass_with_every_codec(kind):
    plain = encode_batch(singles(100))
    check(meta(100, compression=kind, uncompressed_size=len(plain)), compress(kind, plain))


def test_a_message_that_is_no_batch_is_not_looked_into():
    check(meta(None), b"anything at all")


@pytest.mark.parametrize(
    ("count", "payload", "why"),
    [
        (2**31 - 1, encode_batch(singles(1)), "1 to 1000"),
        (0, b"", "1 to 1000"),
        (-1, b"", "1 to 1000"),
        (MAX_MESSAGES + 1, encode_batch(singles(MAX_MESSAGES + 1)), "1 to 1000"),
        (5, b"\x00\x00\x00\x02", "runs past the end"),
        (3, encode_batch(singles(2)), "before its declared message count"),
        (2, encode_batch(singles(2)) + b"x", "ends at byte"),
        (1, struct.pack(">I", 3) + b"\xff\xff\xff", "malformed single message metadata"),
        (1, encode_batch(singles(1))[:-1], "payload runs past the end"),
        (1, struct.pack(">I", 0), "missing required fields"),
    ],
)
def test_batches_that_do_not_add_up_are_refused(count, payload, why):
    with pytest.raises(InvalidMessage, match=why):
        check(meta(count), payload)


def test_compressed_batch_is_checked_after_decompression():
    plain = encode_batch(singles(1))
    with pytest.raises(InvalidMessage, match="before its declared message count"):
        check(meta(2, compression=wire.LZ4, uncompressed_size=len(plain)), compress(wire.LZ4, plain))


def test_compressed_payload_that_does_not_decode_is_refused():
    with pytest.raises(InvalidMessage, match="does not decode"):
        check(meta(1, compression=wire.LZ4, uncompressed_size=100), b"\xff" * 20)


def test_uncompressed_size_beyond_the_maximum_message_size_is_refused_without_decoding():
    with pytest.raises(InvalidMessage, match="exceeds the maximum message size"):
        check(meta(None, compression=wire.ZLIB, uncompressed_size=MAX_SIZE + 1), b"")


def test_a_chunk_may_announce_the_whole_message_size():
    chunk = meta(None, compression=wire.LZ4, uncompressed_size=3 * MAX_SIZE, uuid="u", chunk_id=0)
    chunk.num_chunks_from_msg = 4
    check(chunk, b"part of a compressed message")


def test_a_chunk_cannot_be_a_batch():
    chunk = meta(1, uuid="u", chunk_id=0, num_chunks_from_msg=2)
    with pytest.raises(InvalidMessage, match="chunk"):
        check(chunk, encode_batch(singles(1)))


@pytest.mark.parametrize("kind", [wire.ZLIB, wire.ZSTD, wire.SNAPPY])
def test_decoding_stops_at_the_announced_size(kind):
    """A small payload that unpacks to far more than it announces is refused, not unpacked."""
    bomb = compress(kind, b"\x00" * (8 * 1024 * 1024))
    with pytest.raises(ProtocolError):
        decompress(kind, bomb, 1000)


# -- fuzz: any bytes in, a batch whose parts add up or a clean error out ---------------------------

# No per-example deadline: time on a loaded machine is no finding (the size limits are asserted).
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def assert_checked_or_refused(metadata: wire.MessageMetadata, payload: bytes) -> None:
    try:
        check(metadata, payload)
    except InvalidMessage:
        return
    if not metadata.HasField("num_messages_in_batch"):
        return
    plain = payload
    if metadata.compression != wire.NONE:
        plain = decompress(metadata.compression, payload, metadata.uncompressed_size)
    parts = list(iter_batch(plain, metadata.num_messages_in_batch))
    assert len(parts) == metadata.num_messages_in_batch
    assert sum(4 + single.ByteSize() + len(body) for single, body in parts) == len(plain)


@FUZZ
@given(data=st.binary(max_size=512), count=st.integers(min_value=-2, max_value=40))
def test_fuzz_arbitrary_bytes(data, count):
    assert_checked_or_refused(meta(count), data)


@FUZZ
@given(
    n=st.integers(min_value=1, max_value=8),
    at=st.integers(min_value=0),
    flip=st.integers(min_value=1, max_value=255),
    cut=st.integers(min_value=0, max_value=4),
    count_delta=st.integers(min_value=-2, max_value=2),
    kind=st.sampled_from([wire.NONE, wire.LZ4, wire.ZLIB, wire.ZSTD, wire.SNAPPY]),
)
def test_fuzz_mutated_batches(n, at, flip, cut, count_delta, kind):
    plain = bytearray(encode_batch(singles(n)))
    plain[at % len(plain)] ^= flip
    plain = bytes(plain[: len(plain) - cut])
    metadata = meta(n + count_delta, compression=kind, uncompressed_size=len(plain))
    assert_checked_or_refused(metadata, compress(kind, plain))


@FUZZ
@given(
    data=st.binary(max_size=256),
    kind=st.sampled_from([wire.LZ4, wire.ZLIB, wire.ZSTD, wire.SNAPPY]),
    size=st.integers(min_value=0, max_value=2**32 - 1),
    count=st.integers(min_value=1, max_value=5),
)
def test_fuzz_compressed_garbage(data, kind, size, count):
    assert_checked_or_refused(meta(count, compression=kind, uncompressed_size=size), data)
