"""commands.wrap and encode/decode round trips for every command the broker sends or receives."""

from __future__ import annotations

import pytest

from magnetar.protocol import encode_frame, wire
from magnetar.protocol.commands import error, message_id, ping, pong, success, wrap

from .support import client_send_payload, decode_one

SUB = wire.CommandSubscribe
ID = message_id(5, 9)

# One body per command type the broker handles or sends, every required field set and some optional ones.
BODIES = [
    wire.CommandConnect(
        client_version="Pulsar-CPP-v4.2.0",
        protocol_version=20,
        auth_method_name="none",
        feature_flags=wire.FeatureFlags(supports_broker_entry_metadata=True),
    ),
    wire.CommandConnected(server_version="magnetar", protocol_version=20, max_message_size=5 * 1024 * 1024),
    SUB(
        topic="persistent://public/default/t",
        subscription="s",
        sub_type=SUB.Failover,
        consumer_id=1,
        request_id=2,
        consumer_name="c",
        durable=False,
        start_message_id=message_id(2**64 - 1, 2**64 - 1),
        initial_position=SUB.Earliest,
        key_shared_meta=wire.KeySharedMeta(
            key_shared_mode=wire.STICKY, hash_ranges=[wire.IntRange(start=0, end=32767)]
        ),
    ),
    wire.CommandProducer(
        topic="persistent://public/default/t",
        producer_id=3,
        request_id=4,
        producer_name="p",
        producer_access_mode=wire.Exclusive,
    ),
    wire.CommandSend(producer_id=3, sequence_id=10, num_messages=5, highest_sequence_id=14, is_chunk=True),
    wire.CommandSendReceipt(producer_id=3, sequence_id=10, message_id=ID, highest_sequence_id=14),
    wire.CommandSendError(producer_id=3, sequence_id=11, error=wire.ChecksumError, message="bad checksum"),
    wire.CommandMessage(consumer_id=1, message_id=ID, redelivery_count=3, ack_set=[-1, 5], consumer_epoch=2),
    wire.CommandAck(
        consumer_id=1,
        ack_type=wire.CommandAck.Individual,
        request_id=6,
        message_id=[
            message_id(5, 9),
            wire.MessageIdData(ledger_id=5, entry_id=10, ack_set=[0b1010], batch_size=4),
        ],
    ),
    wire.CommandAck(consumer_id=1, ack_type=wire.CommandAck.Cumulative, message_id=[ID]),
    wire.CommandAckResponse(consumer_id=1, request_id=6, error=wire.UnknownError, message="nope"),
    wire.CommandFlow(consumer_id=1, message_permits=1000),
    wire.CommandUnsubscribe(consumer_id=1, request_id=7),
    wire.CommandSuccess(request_id=8),
    wire.CommandError(
        request_id=9, error=wire.ConsumerBusy, message="Exclusive consumer is already connected"
    ),
    wire.CommandCloseProducer(producer_id=3, request_id=10),
    wire.CommandCloseConsumer(consumer_id=1, request_id=11),
    wire.CommandProducerSuccess(request_id=4, producer_name="p", last_sequence_id=41, producer_ready=True),
    wire.CommandPing(),
    wire.CommandPong(),
    wire.CommandRedeliverUnacknowledgedMessages(consumer_id=1, message_ids=[ID, message_id(5, 12)]),
    wire.CommandRedeliverUnacknowledgedMessages(consumer_id=1),
    wire.CommandPartitionedTopicMetadata(topic="persistent://public/default/t", request_id=12),
    wire.CommandPartitionedTopicMetadataResponse(
        partitions=0, request_id=12, response=wire.CommandPartitionedTopicMetadataResponse.Success
    ),
    wire.CommandLookupTopic(topic="persistent://public/default/t", request_id=13, authoritative=False),
    wire.CommandLookupTopicResponse(
        broker_service_url="pulsar://127.0.0.1:6650",
        request_id=13,
        authoritative=True,
        response=wire.CommandLookupTopicResponse.Connect,
        proxy_through_service_url=False,
    ),
    wire.CommandConsumerStats(request_id=14, consumer_id=1),
    wire.CommandConsumerStatsResponse(request_id=14, msg_backlog=3, consumer_name="c"),
    wire.CommandSeek(consumer_id=1, request_id=15, message_id=ID),
    wire.CommandSeek(consumer_id=1, request_id=16, message_publish_time=1_700_000_000_000),
    wire.CommandGetLastMessageId(consumer_id=1, request_id=17),
    wire.CommandGetLastMessageIdResponse(
        last_message_id=message_id(5, 2**64 - 1), request_id=17, consumer_mark_delete_position=ID
    ),
    wire.CommandActiveConsumerChange(consumer_id=1, is_active=True),
    wire.CommandGetTopicsOfNamespace(
        request_id=18, namespace="public/default", topics_pattern="public/default/a.*"
    ),
    wire.CommandGetTopicsOfNamespaceResponse(
        request_id=18,
        topics=["persistent://public/default/a1"],
        filtered=True,
        topics_hash="abc",
        changed=True,
    ),
    wire.CommandGetSchema(request_id=19, topic="persistent://public/default/t"),
    wire.CommandGetSchemaResponse(request_id=19, error_code=wire.TopicNotFound, error_message="no schema"),
    wire.CommandGetOrCreateSchema(
        request_id=20,
        topic="persistent://public/default/t",
        schema=wire.Schema(name="s", schema_data=b"", type=wire.Schema.String),
    ),
    wire.CommandGetOrCreateSchemaResponse(request_id=20, schema_version=b"\x00" * 8),
]


def body_id(body) -> str:
    return body.DESCRIPTOR.name


@pytest.mark.parametrize("body", BODIES, ids=[body_id(b) for b in BODIES])
def test_round_trip(body):
    command = wrap(body)
    frame = decode_one(encode_frame(command))
    assert frame.command == command
    assert frame.body() == body
    assert getattr(frame.command, frame.type_name.lower()) == body


@pytest.mark.parametrize("body_type", [wire.CommandSend, wire.CommandMessage])
def test_round_trip_with_payload(body_type):
    body = (
        wire.CommandSend(producer_id=1, sequence_id=2)
        if body_type is wire.CommandSend
        else wire.CommandMessage(consumer_id=1, message_id=ID)
    )
    payload = client_send_payload("SEND-plain")
    frame = decode_one(encode_frame(wrap(body), payload))
    assert frame.body() == body
    assert bytes(frame.payload) == payload


def test_every_body_field_of_base_command_is_wrappable_under_its_own_type():
    for field in wire.BaseCommand.DESCRIPTOR.fields:
        if field.message_type is None:
            continue
        command = wrap(getattr(wire, field.message_type.name)())
        assert command.type == wire.BaseCommand.Type.Value(field.name.upper())
        assert command.HasField(field.name)


def test_the_broker_command_set_is_covered():
    covered = {wrap(body).type for body in BODIES}
    needed = {
        wire.BaseCommand.Type.Value(name)
        for name in [
            "CONNECT",
            "CONNECTED",
            "SUBSCRIBE",
            "PRODUCER",
            "SEND",
            "SEND_RECEIPT",
            "SEND_ERROR",
            "MESSAGE",
            "ACK",
            "ACK_RESPONSE",
            "FLOW",
            "UNSUBSCRIBE",
            "SUCCESS",
            "ERROR",
            "CLOSE_PRODUCER",
            "CLOSE_CONSUMER",
            "PRODUCER_SUCCESS",
            "PING",
            "PONG",
            "REDELIVER_UNACKNOWLEDGED_MESSAGES",
            "PARTITIONED_METADATA",
            "PARTITIONED_METADATA_RESPONSE",
            "LOOKUP",
            "LOOKUP_RESPONSE",
            "SEEK",
            "GET_LAST_MESSAGE_ID",
            "GET_LAST_MESSAGE_ID_RESPONSE",
            "ACTIVE_CONSUMER_CHANGE",
            "GET_TOPICS_OF_NAMESPACE",
            "GET_TOPICS_OF_NAMESPACE_RESPONSE",
        ]
    }
    assert needed <= covered


def test_helpers():
    assert ping() == wrap(wire.CommandPing())
    assert pong().type == wire.BaseCommand.PONG
    assert success(7) == wrap(wire.CommandSuccess(request_id=7))
    err = error(3, wire.ServiceNotReady, "not yet")
    assert err.type == wire.BaseCommand.ERROR
    assert (err.error.request_id, err.error.error, err.error.message) == (3, wire.ServiceNotReady, "not yet")


def test_message_id_leaves_partition_and_batch_index_unset_by_default():
    plain = message_id(1, 2)
    assert not plain.HasField("partition") and not plain.HasField("batch_index")
    assert (plain.partition, plain.batch_index) == (-1, -1)
    full = message_id(1, 2, partition=3, batch_index=4)
    assert (full.ledger_id, full.entry_id, full.partition, full.batch_index) == (1, 2, 3, 4)
