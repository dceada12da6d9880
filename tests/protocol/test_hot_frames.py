"""The hand-encoded MESSAGE and SEND_RECEIPT frames are byte for byte what protobuf makes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import encode_frame
from magnetar.protocol.hot_frames import (
    consumer_id_field,
    message_header,
    message_id_field,
    partition_field,
    plain_message_header,
    send_receipt_frame,
    varint,
)

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
i64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
#: A topic's partition index: -1 when it is no partition.
partitions = st.integers(min_value=-1, max_value=(1 << 31) - 1)


def message_command(consumer_id: int, ledger_id: int, entry_id: int, partition: int) -> wire.CommandMessage:
    """The MESSAGE as Pulsar's broker builds it: the partition in the message id on a partition,
    left out (-1, the default) otherwise."""
    msg_id = wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)
    if partition >= 0:
        msg_id.partition = partition
    return wire.CommandMessage(consumer_id=consumer_id, message_id=msg_id)


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_varint_matches_protobuf(value):
    encoded = wire.MessageIdData(ledger_id=value, entry_id=0).SerializeToString()
    assert encoded[1 : 1 + len(varint(value))] == varint(value)


def test_the_partition_field_is_left_out_for_a_topic_that_is_no_partition():
    assert partition_field(-1) == b""
    assert partition_field(0) == b"\x18\x00"
    assert partition_field(300) == b"\x18" + varint(300)


@given(
    consumer_id=u64,
    ledger_id=u64,
    entry_id=u64,
    redelivery=st.integers(min_value=0, max_value=(1 << 32) - 1),
    ack_set=st.lists(i64, max_size=3),
    payload=st.binary(max_size=64),
    partition=partitions,
)
def test_message_frame_equals_protobuf(
    consumer_id, ledger_id, entry_id, redelivery, ack_set, payload, partition
):
    cmd = message_command(consumer_id, ledger_id, entry_id, partition)
    if redelivery:
        cmd.redelivery_count = redelivery
    cmd.ack_set.extend(ack_set)
    expected = encode_frame(wrap(cmd), payload)
    field = partition_field(partition)
    ours = (
        message_header(consumer_id, ledger_id, entry_id, redelivery, ack_set, len(payload), field) + payload
    )
    assert ours == expected
    decoder = FrameDecoder(1 << 20)
    decoder.feed(ours)
    frame = decoder.next_frame()
    assert frame.body() == cmd and bytes(frame.payload or b"") == payload


@given(consumer_id=u64, ledger_id=u64, entry_id=u64, payload=st.binary(max_size=64), partition=partitions)
def test_plain_message_header_from_shared_fields_equals_the_full_one(
    consumer_id, ledger_id, entry_id, payload, partition
):
    # The broadcast path encodes the consumer id once per consumer and the message id once per
    # entry (the partition once per topic); the frame must still be exactly what protobuf makes.
    field = partition_field(partition)
    fields = consumer_id_field(consumer_id), message_id_field(ledger_id, entry_id, field)
    plain = plain_message_header(*fields, len(payload))
    assert plain == message_header(consumer_id, ledger_id, entry_id, 0, None, len(payload), field)
    cmd = message_command(consumer_id, ledger_id, entry_id, partition)
    assert plain + payload == encode_frame(wrap(cmd), payload)


def test_the_largest_plain_header_still_has_a_one_byte_command_length():
    top = (1 << 64) - 1
    field = partition_field((1 << 31) - 1)
    plain = plain_message_header(consumer_id_field(top), message_id_field(top, top, field), 0)
    assert plain == encode_frame(wrap(message_command(top, top, top, (1 << 31) - 1)))


@given(producer_id=u64, sequence_id=u64, ledger_id=u64, entry_id=u64, highest=u64)
def test_send_receipt_frame_equals_protobuf(producer_id, sequence_id, ledger_id, entry_id, highest):
    receipt = wire.CommandSendReceipt(
        producer_id=producer_id,
        sequence_id=sequence_id,
        message_id=wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id),
    )
    if highest:
        receipt.highest_sequence_id = highest
    assert send_receipt_frame(producer_id, sequence_id, ledger_id, entry_id, highest) == encode_frame(
        wrap(receipt)
    )


BOUNDARIES = [0x7F, 0x80, 0x3FFF, 0x4000, 0x1F_FFFF, 0x20_0000]


@given(st.one_of(st.integers(0, 0x20_0001), st.sampled_from(BOUNDARIES)))
def test_varint_of_one_to_three_bytes_is_mqtts_variable_byte_integer(value):
    """The short paths (one, two, three bytes: sequence ids, Remaining Lengths) against the MQTT
    codec's loop and protobuf's own encoding, at and around each boundary."""
    from magnetar.protocol.mqtt.primitives import varint as variable_byte_integer

    assert varint(value) == variable_byte_integer(value)
    encoded = wire.MessageIdData(ledger_id=value, entry_id=0).SerializeToString()
    assert encoded[1 : 1 + len(varint(value))] == varint(value)
