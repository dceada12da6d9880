"""Every reader of a batch says the same of the same bytes: ``iter_batch``, ``iter_batch_reused``,
``iter_batch_properties`` and the broker's check (``check_message``) all walk one framing
(``batch._members``), so they take the same messages from a batch, and refuse a batch that does
not add up (cut short, a count that lies) with the same words."""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import (
    InvalidMessage,
    check_message,
    encode_batch,
    iter_batch,
    iter_batch_properties,
    iter_batch_reused,
    properties_of,
)

_U32 = struct.Struct(">I")
# No per-example deadline: time on a loaded machine is no finding.
AGREE = settings(max_examples=300, deadline=None)

Outcome = tuple[str, object]


def _batch_of(count: int) -> wire.MessageMetadata:
    return wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1, num_messages_in_batch=count)


def _refused(exc: ProtocolError) -> Outcome:
    return ("refused", (type(exc), str(exc)))


def _message(single: wire.SingleMessageMetadata, payload: memoryview) -> tuple[object, ...]:
    return ([(kv.key, kv.value) for kv in single.properties], bytes(payload), single.SerializeToString())


def fresh(data: bytes, count: int) -> Outcome:
    try:
        return ("read", [_message(s, p) for s, p in iter_batch(data, count)])
    except ProtocolError as exc:
        return _refused(exc)


def reused(data: bytes, count: int) -> Outcome:
    try:
        return ("read", [_message(s, p) for s, p in iter_batch_reused(data, count)])
    except ProtocolError as exc:
        return _refused(exc)


def properties(data: bytes, count: int) -> Outcome:
    """As ``fresh`` says it, from what ``iter_batch_properties`` yields: the metadata it parsed
    whole, or (read without protobuf) the properties and the payload, but no whole metadata."""
    try:
        out = []
        for key, single, payload in iter_batch_properties(data, count):
            if single is None:
                out.append((properties_of(key), bytes(payload), None))
            else:
                out.append(_message(single, payload))
        return ("read", out)
    except ProtocolError as exc:
        return _refused(exc)


def checked(data: bytes, count: int) -> Outcome:
    """The broker's check, as ``reused`` says it: the messages its walk found (read back with
    ``iter_batch_reused`` up to where the walk says they end), or its words with ProtocolError's
    type, as it refuses with ``InvalidMessage`` (a ProtocolError) what the readers refuse with
    ProtocolError."""
    try:
        check_message(_batch_of(count), data, max_messages=1000, max_size=1 << 20)
    except InvalidMessage as exc:
        left_over = re.fullmatch(rf"batch of {count} messages ends at byte (\d+) of its \d+", str(exc))
        if left_over:  # bytes after the messages: read them as the walk found them
            return reused(data[: int(left_over[1])], count)
        return ("refused", (ProtocolError, str(exc)))
    return reused(data, count)


def alike(one: Outcome, other: Outcome) -> bool:
    """The same outcome; a message read without its whole metadata (None) matches on the rest."""
    if one[0] != other[0] or one[0] == "refused":
        return one == other
    ones, others = one[1], other[1]
    assert isinstance(ones, list) and isinstance(others, list)
    if len(ones) != len(others):
        return False
    return all((a[:2] == b[:2] and None in (a[2], b[2])) or a == b for a, b in zip(ones, others, strict=True))


READERS = {"iter_batch": fresh, "iter_batch_reused": reused, "iter_batch_properties": properties}

_text = st.text(max_size=12)
_single = st.builds(
    wire.SingleMessageMetadata,
    properties=st.lists(st.builds(wire.KeyValue, key=_text, value=_text), max_size=3),
    sequence_id=st.none() | st.integers(0, 2**64 - 1),
    partition_key=st.none() | _text,
    event_time=st.none() | st.integers(0, 2**64 - 1),
    null_value=st.none() | st.booleans(),
)
_messages = st.lists(st.tuples(_single, st.binary(max_size=200)), max_size=6)


@AGREE
@given(messages=_messages, count_off=st.integers(-2, 2), cut=st.none() | st.integers(0, 2_000))
def test_every_reader_reads_or_refuses_a_batch_alike(messages, count_off, cut):
    """A valid batch, read with its count or one that lies, whole or cut short anywhere."""
    data = encode_batch(messages)
    if cut is not None:
        data = data[: min(cut, len(data))]
    count = max(0, len(messages) + count_off)
    outcomes = {name: read(data, count) for name, read in READERS.items()}
    if count >= 1:
        outcomes["check_message"] = checked(data, count)
    expected = outcomes["iter_batch"]
    assert all(alike(outcome, expected) for outcome in outcomes.values()), outcomes
    if cut is None and count_off <= 0:
        assert expected == ("read", [_message(s, memoryview(p)) for s, p in messages[:count]])


def _framed(parts: list[tuple[bytes, bytes]]) -> bytes:
    return b"".join(_U32.pack(len(metadata)) + metadata + payload for metadata, payload in parts)


#: Metadata whose payload_size may lie, or is any bytes at all (well framed, so the walk reaches it).
_metadata = st.builds(
    lambda single, size: single.SerializePartialToString() if size is None else _sized(single, size),
    _single,
    st.none() | st.integers(-3, 40),
) | st.binary(max_size=12)


def _sized(single: wire.SingleMessageMetadata, size: int) -> bytes:
    single.payload_size = size
    return single.SerializeToString()


@AGREE
@given(
    data=st.binary(max_size=60)
    | st.builds(_framed, st.lists(st.tuples(_metadata, st.binary(max_size=20)), max_size=4)),
    count=st.integers(1, 4),
)
def test_any_bytes_are_framed_alike(data, count):
    """Any bytes: the readers that parse into one object (the bulk reader and the broker's check)
    agree to the word; the others refuse what those refuse in the same words, and besides only a
    property without its key or value (a required field nested in the metadata: ``iter_batch``
    checks the whole metadata, the fast readers only ``payload_size``)."""
    lenient = reused(data, count)
    assert checked(data, count) == lenient
    for strict in (fresh(data, count), properties(data, count)):
        if not alike(strict, lenient):
            kind, (error, words) = strict  # type: ignore[misc]
            assert kind == "refused" and error is ProtocolError, (strict, lenient)
            assert words.startswith("single message metadata is missing required fields: properties["), words


_ONE = encode_batch([(wire.SingleMessageMetadata(), b"ab")])


@pytest.mark.parametrize(
    ("data", "count", "words"),
    [
        (_ONE, 2, "batch ends before its declared message count"),
        (_U32.pack(9) + b"\x18\x00", 1, "single message metadata runs past the end of the batch"),
        (_ONE[:-1], 1, "message payload runs past the end of the batch"),
    ],
)
def test_the_words_of_a_batch_that_does_not_add_up(data, count, words):
    for name, read in READERS.items():
        kind, (error, said) = read(data, count)  # type: ignore[misc]
        assert kind == "refused" and error is ProtocolError and said.startswith(words), name
    with pytest.raises(InvalidMessage, match=words):
        check_message(_batch_of(count), data, max_messages=1000, max_size=1 << 20)
