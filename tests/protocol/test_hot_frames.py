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
    plain_message_header,
    send_receipt_frame,
    varint,
)

u64 = st.integers(min_value=0, max_value=(1 << 64) - 1)
i64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@given(st.integers(min_value=0, max_value=(1 << 64) - 1))
def test_varint_matches_protobuf(value):
    encoded = wire.MessageIdData(ledger_id=value, entry_id=0).SerializeToString()
    assert encoded[1 : 1 + len(varint(value))] == varint(value)


@given(
    consumer_id=u64,
    ledger_id=u64,
    entry_id=u64,
    redelivery=st.integers(min_value=0, max_value=(1 << 32) - 1),
    ack_set=st.lists(i64, max_size=3),
    payload=st.binary(max_size=64),
)
def test_message_frame_equals_protobuf(consumer_id, ledger_id, entry_id, redelivery, ack_set, payload):
    cmd = wire.CommandMessage(
        consumer_id=consumer_id, message_id=wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)
    )
    if redelivery:
        cmd.redelivery_count = redelivery
    cmd.ack_set.extend(ack_set)
    expected = encode_frame(wrap(cmd), payload)
    ours = message_header(consumer_id, ledger_id, entry_id, redelivery, ack_set, len(payload)) + payload
    assert ours == expected
    decoder = FrameDecoder(1 << 20)
    decoder.feed(ours)
    frame = decoder.next_frame()
    assert frame.body() == cmd and bytes(frame.payload or b"") == payload


@given(consumer_id=u64, ledger_id=u64, entry_id=u64, payload=st.binary(max_size=64))
def test_plain_message_header_from_shared_fields_equals_the_full_one(
    consumer_id, ledger_id, entry_id, payload
):
    # The broadcast path encodes the consumer id once per consumer and the message id once per
    # entry; the frame must still be exactly what protobuf makes.
    fields = consumer_id_field(consumer_id), message_id_field(ledger_id, entry_id)
    plain = plain_message_header(*fields, len(payload))
    assert plain == message_header(consumer_id, ledger_id, entry_id, 0, None, len(payload))
    cmd = wire.CommandMessage(
        consumer_id=consumer_id, message_id=wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)
    )
    assert plain + payload == encode_frame(wrap(cmd), payload)


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
