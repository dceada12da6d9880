"""Finding string fields whose bytes are not UTF-8 (protobuf hands them back as bytes)."""

from __future__ import annotations

from magnetar.protocol import wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import parse_command
from magnetar.protocol.text import undecodable_field, undecodable_metadata

MARK = "PLACEHOLDER"
NOT_UTF8 = b"bad-\xff\xfe-name"


def poisoned(message):
    """``message`` as it parses after MARK's bytes were replaced by bytes that are not UTF-8."""
    raw = message.SerializeToString().replace(MARK.encode(), NOT_UTF8)
    parsed = type(message)()
    parsed.ParseFromString(raw)
    return parsed


def test_valid_text_passes():
    cmd = wire.CommandSubscribe(topic="t", subscription="s", sub_type=0, consumer_id=1, request_id=1)
    assert undecodable_field(cmd) is None


def test_protobuf_hands_back_bytes_and_does_not_raise():
    command = parse_command(
        wrap(wire.CommandLookupTopic(topic=MARK, request_id=1))
        .SerializeToString()
        .replace(MARK.encode(), NOT_UTF8)
    )
    assert command.lookup.topic == NOT_UTF8
    assert undecodable_field(command.lookup) == "topic"


def test_nested_and_repeated_fields_are_named():
    cmd = wire.CommandSubscribe(
        topic="t",
        subscription="s",
        sub_type=0,
        consumer_id=1,
        request_id=1,
        metadata=[wire.KeyValue(key="k", value="v"), wire.KeyValue(key="k2", value=MARK)],
    )
    assert undecodable_field(poisoned(cmd)) == "metadata.value"
    topics = wire.CommandGetTopicsOfNamespaceResponse(request_id=1, topics=["a", MARK])
    assert undecodable_field(poisoned(topics)) == "topics"


def test_message_metadata_fields_the_broker_reads():
    for field in ("producer_name", "partition_key", "uuid"):
        metadata = wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
        setattr(metadata, field, MARK)
        assert undecodable_metadata(poisoned(metadata)) == field
    metadata = wire.MessageMetadata(
        producer_name="p", sequence_id=0, publish_time=1, properties=[wire.KeyValue(key=MARK, value="v")]
    )
    assert undecodable_metadata(poisoned(metadata)) == "properties"
    assert (
        undecodable_metadata(wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)) is None
    )
