"""Message ids as they travel: the wire's uint64 ids, serialized ids, the index look-ups' JSON."""

import pytest

from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.message_id import (
    INT64_MAX,
    message_id_fields,
    message_id_json,
    parse_message_id,
    to_signed,
    to_u64,
)


@pytest.mark.parametrize("value", [-1, 0, 1, 12345, INT64_MAX, -(1 << 63)])
def test_signed_ids_travel_as_uint64_and_come_back(value):
    wire_value = to_u64(value)
    assert 0 <= wire_value < 1 << 64
    assert to_signed(wire_value) == value


def test_earliest_travels_as_the_largest_uint64():
    assert to_u64(-1) == (1 << 64) - 1 and to_signed((1 << 64) - 1) == -1


def test_a_serialized_id_parses_and_garbage_is_a_protocol_error():
    data = wire.MessageIdData(ledger_id=to_u64(-1), entry_id=7, batch_index=2).SerializeToString()
    parsed = parse_message_id(data)
    assert (to_signed(parsed.ledger_id), parsed.entry_id, parsed.batch_index) == (-1, 7, 2)
    with pytest.raises(ProtocolError, match="malformed message id"):
        parse_message_id(b"\xff\xff\xff")
    with pytest.raises(ProtocolError, match="missing required fields"):
        parse_message_id(wire.MessageIdData(entry_id=1).SerializePartialToString())


def test_the_json_form_goes_both_ways():
    body = message_id_json(3, 9, 1, 2)
    assert body == {"ledgerId": 3, "entryId": 9, "batchIndex": 1, "partition": 2}
    assert message_id_fields(body) == (3, 9, 1, 2)
    assert message_id_fields({"ledgerId": "3", "entryId": 9}) == (3, 9, -1, -1)
    with pytest.raises(KeyError):
        message_id_fields({"ledgerId": 3})
