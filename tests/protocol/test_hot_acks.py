"""The usual ACK and MESSAGE read without protobuf (hot_acks.py) read what protobuf reads, or decline."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import Frame, parse_command
from magnetar.protocol.hot_acks import HotAck, HotMessage, read_ack, read_message
from magnetar.protocol.hot_frames import ack_frame, message_header, partition_field
from magnetar.varint import encode as varint

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
ack_types = st.sampled_from([wire.CommandAck.Individual, wire.CommandAck.Cumulative])


def ack_command(consumer_id: int, ack_type: int, ledger_id: int, entry_id: int) -> wire.BaseCommand:
    msg_id = wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)
    return wrap(wire.CommandAck(consumer_id=consumer_id, ack_type=ack_type, message_id=[msg_id]))


@given(consumer_id=u64, ack_type=ack_types, ledger_id=u64, entry_id=u64)
def test_the_usual_ack_is_read_as_protobuf_reads_it(consumer_id, ack_type, ledger_id, entry_id):
    frame = encode_frame(ack_command(consumer_id, ack_type, ledger_id, entry_id))
    ack = read_ack(frame[4:], 4)
    assert ack == HotAck(consumer_id, ack_type == wire.CommandAck.Cumulative, ledger_id, entry_id, frame[8:])
    assert parse_command(ack.command) == ack_command(consumer_id, ack_type, ledger_id, entry_id)


@given(
    consumer_id=u64,
    ledger_id=u64,
    entry_id=u64,
    extra=st.sampled_from(["ids", "ack_set", "request", "props"]),
)
def test_any_other_ack_is_declined(consumer_id, ledger_id, entry_id, extra):
    command = ack_command(consumer_id, wire.CommandAck.Individual, ledger_id, entry_id)
    if extra == "ids":
        command.ack.message_id.add(ledger_id=ledger_id, entry_id=(entry_id + 1) % (1 << 64))
    elif extra == "ack_set":
        command.ack.message_id[0].ack_set.append(5)
    elif extra == "request":
        command.ack.request_id = 7
    else:
        command.ack.properties.add(key="k", value=2)
    frame = encode_frame(command)
    assert read_ack(frame[4:], 4) is None


@given(
    consumer_id=u64,
    ack_type=ack_types,
    ledger_id=u64,
    entry_id=u64,
    at=st.integers(min_value=0, max_value=40),
    byte=st.integers(min_value=0, max_value=255),
    cut=st.integers(min_value=0, max_value=3),
)
def test_damaged_acks_are_declined_or_read_exactly_as_protobuf(
    consumer_id, ack_type, ledger_id, entry_id, at, byte, cut
):
    body = bytearray(encode_frame(ack_command(consumer_id, ack_type, ledger_id, entry_id))[8:])
    body[at % len(body)] = byte
    body = bytes(body[: len(body) - cut])
    ack = read_ack(b"\0\0\0\0" + body, 4)
    if ack is None:
        return  # the full parser decides
    command = wire.BaseCommand()
    command.ParseFromString(body)
    assert command.IsInitialized() and command.type == wire.BaseCommand.ACK
    (msg_id,) = command.ack.message_id
    assert (command.ack.consumer_id, msg_id.ledger_id, msg_id.entry_id) == (
        ack.consumer_id,
        ack.ledger_id,
        ack.entry_id,
    )
    assert ack.cumulative == (command.ack.ack_type == wire.CommandAck.Cumulative)


def test_only_a_decoder_asked_for_them_hands_out_hot_acks():
    frames = encode_frame(ack_command(5, wire.CommandAck.Cumulative, 3, 9)) * 2
    plain, hot = FrameDecoder(1 << 20), FrameDecoder(1 << 20, hot_acks=True)
    plain.feed(frames)
    hot.feed(frames)
    assert all(isinstance(f, Frame) for f in plain.frames())
    assert [type(f) for f in hot.frames()] == [HotAck, HotAck]


@given(consumer_id=u64, ack_type=ack_types, ledger_id=u64, entry_id=u64)
def test_the_hand_encoded_ack_is_what_protobuf_makes(consumer_id, ack_type, ledger_id, entry_id):
    cumulative = ack_type == wire.CommandAck.Cumulative
    frame = ack_frame(consumer_id, cumulative, ledger_id, entry_id)
    assert frame == encode_frame(ack_command(consumer_id, ack_type, ledger_id, entry_id))
    assert read_ack(frame[4:], 4) == HotAck(consumer_id, cumulative, ledger_id, entry_id, frame[8:])


@given(consumer_id=u64, ledger_id=u64, entry_id=u64, payload=st.binary(max_size=64))
def test_the_usual_message_is_read_as_protobuf_reads_it(consumer_id, ledger_id, entry_id, payload):
    frame = message_header(consumer_id, ledger_id, entry_id, 0, None, len(payload)) + payload
    decoder = FrameDecoder(1 << 20, hot_messages=True)
    decoder.feed(frame)
    message = decoder.next_frame()
    assert isinstance(message, HotMessage)
    assert message[:3] == (consumer_id, ledger_id, entry_id) and bytes(message.payload) == payload
    assert message.partition == -1


@given(
    consumer_id=u64,
    ledger_id=u64,
    entry_id=u64,
    partition=st.integers(min_value=0, max_value=(1 << 31) - 1),
    payload=st.binary(max_size=64),
)
def test_a_message_of_a_partition_is_read_with_its_partition(
    consumer_id, ledger_id, entry_id, partition, payload
):
    field = partition_field(partition)
    frame = message_header(consumer_id, ledger_id, entry_id, 0, None, len(payload), field) + payload
    decoder = FrameDecoder(1 << 20, hot_messages=True)
    decoder.feed(frame)
    message = decoder.next_frame()
    assert message == HotMessage(consumer_id, ledger_id, entry_id, partition, message.payload)
    assert bytes(message.payload) == payload


@pytest.mark.parametrize("partition", [-1, -2, -(1 << 31)])
def test_a_negative_partition_written_out_is_read_as_protobuf_reads_it(partition):
    # Pulsar's broker writes partition -1 on a topic that is no partition: ten bytes, as an int64.
    msg_id = wire.MessageIdData(ledger_id=7, entry_id=9, partition=partition)
    frame = encode_frame(wrap(wire.CommandMessage(consumer_id=3, message_id=msg_id)), b"xy")
    decoder = FrameDecoder(1 << 20, hot_messages=True)
    decoder.feed(frame)
    message = decoder.next_frame()
    assert message == HotMessage(3, 7, 9, partition, message.payload) and bytes(message.payload) == b"xy"


def test_a_partition_that_is_no_int32_is_parsed_in_full():
    # A varint past int32 (or past 64 bits) is not what an encoder writes: the fast reader declines it.
    def command(raw_partition: bytes) -> bytes:
        msg_id = b"\x08\x07\x10\x09\x18" + raw_partition
        body = b"\x08\x03\x12" + bytes([len(msg_id)]) + msg_id
        return b"\x08\x09\x4a" + bytes([len(body)]) + body

    assert read_message(command(varint(5)), 0, len(command(varint(5))))[:4] == (3, 7, 9, 5)
    for raw in (varint(1 << 31), varint((1 << 63) - 1), b"\xff" * 9 + b"\x7f"):
        assert read_message(command(raw), 0, len(command(raw))) is None


@given(
    consumer_id=u64,
    ledger_id=u64,
    entry_id=u64,
    redelivery=st.integers(min_value=0, max_value=9),
    ack_set=st.lists(st.integers(min_value=0, max_value=9), max_size=2),
)
def test_a_message_sent_again_or_with_an_ack_set_is_parsed_in_full(
    consumer_id, ledger_id, entry_id, redelivery, ack_set
):
    frame = message_header(consumer_id, ledger_id, entry_id, redelivery, ack_set, 3) + b"abc"
    decoder = FrameDecoder(1 << 20, hot_messages=True)
    decoder.feed(frame)
    got = decoder.next_frame()
    if redelivery or ack_set:
        assert isinstance(got, Frame) and got.command.message.redelivery_count == redelivery
    else:
        assert isinstance(got, HotMessage)
