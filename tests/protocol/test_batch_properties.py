"""``iter_batch_properties``: a batch taken apart for readers that want each message's properties
and payload, the common metadata (properties, payload_size, sequence_id) read without protobuf
and every other one parsed whole; it must say what ``iter_batch`` says of every batch."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.batch import encode_batch, iter_batch, iter_batch_properties, properties_of

_U32 = struct.Struct(">I")


def read(data: bytes, count: int) -> list[tuple[list[tuple[str, str]], bytes]]:
    """Each message's properties and payload, as ``iter_batch_properties`` gives them."""
    out = []
    for key, single, payload in iter_batch_properties(data, count):
        if single is None:
            pairs = properties_of(key)
        else:
            assert key == b""
            pairs = [(kv.key, kv.value) for kv in single.properties]
        out.append((pairs, bytes(payload)))
    return out


def reference(data: bytes, count: int) -> list[tuple[list[tuple[str, str]], bytes]]:
    return [([(kv.key, kv.value) for kv in s.properties], bytes(p)) for s, p in iter_batch(data, count)]


def test_properties_payload_size_and_sequence_id_are_read_without_protobuf():
    messages = [
        (
            wire.SingleMessageMetadata(
                sequence_id=seq, properties=[wire.KeyValue(key="MQTT_QOS", value="1")]
            ),
            p,
        )
        for seq, p in [(0, b""), (127, b"a"), (128, b"b" * 200), (16_384, b"c" * 70_000), (2**40, b"d")]
    ]
    data = encode_batch(messages)
    got = list(iter_batch_properties(data, len(messages)))
    assert [single for _, single, _ in got] == [None] * len(messages)  # every one the quick way
    assert len({key for key, _, _ in got}) == 1  # the same properties, the same bytes
    assert read(data, len(messages)) == reference(data, len(messages))
    assert properties_of(got[0][0]) == [("MQTT_QOS", "1")]


def test_no_properties_and_no_sequence_id():
    data = encode_batch([(wire.SingleMessageMetadata(), b"xyz")])
    ((key, single, payload),) = iter_batch_properties(data, 1)
    assert (key, single, bytes(payload)) == (b"", None, b"xyz")
    assert properties_of(key) == []


def test_other_fields_are_parsed_whole():
    messages = [
        (wire.SingleMessageMetadata(partition_key="k", properties=[wire.KeyValue(key="a", value="b")]), b"1"),
        (wire.SingleMessageMetadata(event_time=5, sequence_id=3), b"22"),
        (wire.SingleMessageMetadata(null_value=True), b""),
    ]
    data = encode_batch(messages)
    got = list(iter_batch_properties(data, 3))
    assert all(single is not None for _, single, _ in got)
    assert got[0][1].partition_key == "k" and got[1][1].event_time == 5  # type: ignore[union-attr]
    assert read(data, 3) == reference(data, 3)


def test_fields_out_of_order_or_repeated_are_parsed_whole():
    """Protobuf lets a field come twice (the last one counts) and in any order: only the order it
    writes is read the quick way, anything else goes to protobuf, which reads it right."""
    kv = wire.KeyValue(key="k", value="v").SerializeToString()
    size_then_properties = b"\x18\x02" + b"\x0a" + bytes((len(kv),)) + kv
    twice = b"\x18\x05\x18\x02"
    for raw in (size_then_properties, twice):
        data = _U32.pack(len(raw)) + raw + b"ab"
        ((key, single, payload),) = iter_batch_properties(data, 1)
        assert single is not None and key == b"" and bytes(payload) == b"ab"
        assert read(data, 1) == reference(data, 1)


@pytest.mark.parametrize(
    "raw",
    [
        b"\x0a\x05\x0a\x01k",  # a property running past the metadata
        b"\x0a\x02\x0a\x00\x18\x00",  # a property without its value (required)
        b"\x18" + b"\xff" * 9 + b"\x01",  # payload_size -1 (int32, ten bytes)
        b"\x18\x80",  # payload_size cut short
        b"\x40\x01",  # no payload_size (required)
    ],
)
def test_bad_metadata_is_refused_as_iter_batch_refuses_it(raw: bytes):
    data = _U32.pack(len(raw)) + raw + b"payload"
    with pytest.raises(ProtocolError):
        list(iter_batch(data, 1))
    with pytest.raises(ProtocolError):
        read(data, 1)


def test_a_payload_past_the_end_and_a_short_batch_are_refused():
    data = encode_batch([(wire.SingleMessageMetadata(), b"abc")])
    with pytest.raises(ProtocolError, match="payload runs past"):
        list(iter_batch_properties(data[:-1], 1))
    with pytest.raises(ProtocolError, match="declared message count"):
        list(iter_batch_properties(data, 2))


_text = st.text(max_size=20)
_single = st.builds(
    wire.SingleMessageMetadata,
    properties=st.lists(st.builds(wire.KeyValue, key=_text, value=_text), max_size=3),
    sequence_id=st.none() | st.integers(0, 2**64 - 1),
    partition_key=st.none() | _text,
    event_time=st.none() | st.integers(0, 2**64 - 1),
)


@given(st.lists(st.tuples(_single, st.binary(max_size=300)), min_size=1, max_size=8))
def test_any_batch_reads_as_iter_batch_reads_it(messages):
    data = encode_batch(messages)
    assert read(data, len(messages)) == reference(data, len(messages))


@given(st.binary(max_size=40), st.integers(1, 3))
def test_any_bytes_are_read_or_refused_as_iter_batch_does(data, count):
    try:
        expected = reference(data, count)
    except ProtocolError:
        with pytest.raises(ProtocolError):
            read(data, count)
        return
    assert read(data, count) == expected
