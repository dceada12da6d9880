"""Fuzzing: whatever bytes arrive, the protocol layer raises ProtocolError or nothing, and always finishes."""

from __future__ import annotations

import contextlib
import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, ProtocolError
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.entry import split_entry_metadata, strip_entry_metadata
from magnetar.protocol.headers import parse_metadata, verify_checksum

from .support import ALL_FRAMES, BROKER_FRAMES, CLIENT_FRAMES, client_send_payload

# No per-example deadline: time on a loaded machine is no finding (the size limits are asserted).
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MAX_FRAME = 64 * 1024
SMALLEST_FRAME = 9  # total size, command size, and the shortest BaseCommand (type only): 4 + 4 + 1
VALID_STREAM = b"".join(ALL_FRAMES[name] for name in sorted(ALL_FRAMES))
PAYLOADS = [client_send_payload(name) for name in sorted(CLIENT_FRAMES) if name.startswith("SEND-")]


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def drain(decoder: FrameDecoder, limit: int) -> int:
    """Pull frames until NEED_DATA; at most ``limit`` of them, or the decoder is looping."""
    count = 0
    while decoder.next_frame() is not None:
        count += 1
        assert count <= limit, "decoder returned more frames than the bytes can hold"
    return count


def feed_everything(chunks: list[bytes], max_frame_size: int = MAX_FRAME) -> int:
    """Feed and drain; the number of frames decoded, or -1 on ProtocolError (the only error allowed)."""
    decoder = FrameDecoder(max_frame_size)
    total = sum(map(len, chunks))
    frames = 0
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            frames += drain(decoder, total // SMALLEST_FRAME + 1)
    except ProtocolError:
        return -1
    assert decoder.buffered <= total
    return frames


@FUZZ
@given(data=st.binary(max_size=4096), cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_arbitrary_bytes_only_ever_raise_protocol_error(data, cuts):
    feed_everything(chunked(data, cuts))


@FUZZ
@given(data=st.binary(max_size=512))
def test_arbitrary_bytes_after_valid_frames(data):
    feed_everything([VALID_STREAM, data], max_frame_size=1024 * 1024)


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(min_value=1, max_value=255)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(min_value=1, max_value=8)),
    st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(None)),
)


def mutate(data: bytes, mutations) -> bytes:
    buf = bytearray(data)
    for kind, at, arg in mutations:
        at %= len(buf) + 1
        if kind == "flip" and at < len(buf):
            buf[at] ^= arg
        elif kind == "insert":
            buf[at:at] = arg
        elif kind == "delete":
            del buf[at : at + arg]
        elif kind == "truncate":
            del buf[at:]
        if not buf:
            break
    return bytes(buf)


@FUZZ
@given(
    names=st.lists(st.sampled_from(sorted(ALL_FRAMES)), min_size=1, max_size=6),
    mutations=st.lists(mutation, min_size=1, max_size=4),
    cuts=st.lists(st.integers(min_value=0), max_size=8),
)
def test_mutated_valid_frames_only_ever_raise_protocol_error(names, mutations, cuts):
    data = mutate(b"".join(ALL_FRAMES[n] for n in names), mutations)
    feed_everything(chunked(data, cuts), max_frame_size=1024 * 1024)


@FUZZ
@given(
    names=st.lists(st.sampled_from(sorted(ALL_FRAMES)), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=0), max_size=30),
)
def test_valid_frames_in_any_chunking_all_decode(names, cuts):
    data = b"".join(ALL_FRAMES[n] for n in names)
    assert feed_everything(chunked(data, cuts), max_frame_size=1024 * 1024) == len(names)


def parse_everything(data: bytes, count: int) -> None:
    """Run every payload-level parser on the bytes; each may only raise ProtocolError."""
    for parse in (verify_checksum, parse_metadata, split_entry_metadata, strip_entry_metadata):
        with contextlib.suppress(ProtocolError):
            parse(data)
    with contextlib.suppress(ProtocolError):
        for _ in iter_batch(data, count):
            pass


@FUZZ
@given(data=st.binary(max_size=1024), count=st.integers(min_value=0, max_value=50))
def test_payload_parsers_on_arbitrary_bytes(data, count):
    parse_everything(data, count)


@FUZZ
@given(
    base=st.sampled_from(PAYLOADS + [bytes(v[-60:]) for v in BROKER_FRAMES.values()]),
    mutations=st.lists(mutation, min_size=1, max_size=4),
    count=st.integers(min_value=0, max_value=5),
)
def test_payload_parsers_on_mutated_payloads(base, mutations, count):
    mutated = mutate(base, mutations)
    parse_everything(mutated, count)
    parse_everything(b"\x0e\x02" + mutated, count)
