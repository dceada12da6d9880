"""The WebSocket and REST produce APIs' JSON, without a network: Pulsar's shapes, Java's date
format, message ids as the official client serializes them, and every malformed input turned into
Pulsar's error (fuzzed: nothing else escapes the parsers)."""

from __future__ import annotations

import base64
import contextlib
import json
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.protocol import wire
from magnetar.websocket.json_shapes import (
    BadInput,
    IncomingMessage,
    WebSocketError,
    consumer_message,
    decode_message_id,
    encode_message_id,
    format_time,
    message_id_text,
    parse_consumer_command,
    parse_produce_request,
    parse_producer_message,
    parse_time,
    producer_ack,
    producer_error,
)
from magnetar.websocket.local_producer import message_metadata


@pytest.fixture
def utc(monkeypatch):
    """The broker's local zone as UTC (Pulsar formats times in the JVM's zone)."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture
def berlin(monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_times_as_java_iso_offset_date_time(utc):
    # Java's ISO_OFFSET_DATE_TIME: fraction digits only as needed, Z for UTC.
    assert format_time(1472575557785) == "2016-08-30T16:45:57.785Z"
    assert format_time(1472575557780) == "2016-08-30T16:45:57.78Z"
    assert format_time(1472575557000) == "2016-08-30T16:45:57Z"


def test_times_carry_the_local_offset(berlin):
    assert format_time(1472575557785) == "2016-08-30T18:45:57.785+02:00"
    assert parse_time("2016-08-30T18:45:57.785+02:00") == 1472575557785


def test_event_times_parse_with_an_offset_only():
    assert parse_time("2024-05-01T12:00:00.5+02:00") == 1714557600500
    assert parse_time("2024-05-01T10:00:00Z") == 1714557600000
    assert parse_time(1714557600000) == 1714557600000
    for bad in ("2024-05-01T10:00:00", "yesterday", True, None, 1.5):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_message_ids_round_trip_as_serialized_message_id_data():
    message_id = wire.MessageIdData(ledger_id=3, entry_id=7, partition=1, batch_index=2, batch_size=5)
    text = encode_message_id(message_id)
    assert base64.b64decode(text) == message_id.SerializeToString()
    assert decode_message_id(text) == message_id
    assert message_id_text(message_id) == "3:7:1"
    assert message_id_text(wire.MessageIdData(ledger_id=2**64 - 1, entry_id=2**64 - 1)) == "-1:-1:-1"
    for bad in ("", "***", base64.b64encode(b"\xff\xff").decode(), 5, None):
        with pytest.raises(ValueError):
            decode_message_id(bad)


def test_producer_message_fields():
    message = parse_producer_message(
        json.dumps(
            {
                "payload": base64.b64encode(b"hi").decode(),
                "properties": {"a": "1"},
                "context": 7,
                "key": "k",
                "replicationClusters": ["east"],
                "eventTime": "2024-05-01T10:00:00Z",
                "sequenceId": 9,
                "deliverAfterMs": 100,
            }
        )
    )
    assert (message.payload, message.properties, message.context, message.key) == (
        b"hi",
        {"a": "1"},
        "7",
        "k",
    )
    assert message.replication_clusters == ["east"]
    assert (message.event_time, message.sequence_id, message.deliver_after_ms) == (1714557600000, 9, 100)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("{", WebSocketError.FailedToDeserializeFromJSON),
        ("[1]", WebSocketError.FailedToDeserializeFromJSON),
        ('{"payload": "***"}', WebSocketError.PayloadEncodingError),
        ('{"payload": 1}', WebSocketError.PayloadEncodingError),
        ("{}", WebSocketError.PayloadEncodingError),
        ('{"payload": "", "properties": {"a": 1}}', WebSocketError.FailedToDeserializeFromJSON),
        ('{"payload": "", "sequenceId": -1}', WebSocketError.FailedToDeserializeFromJSON),
        ('{"payload": "", "eventTime": "soon"}', WebSocketError.PayloadEncodingError),
        ('{"payload": "", "context": {"x": 1}}', WebSocketError.FailedToDeserializeFromJSON),
    ],
)
def test_producer_message_errors_name_pulsars_code(text, error):
    with pytest.raises(BadInput) as refused:
        parse_producer_message(text)
    assert refused.value.error is error


def test_producer_answers_as_pulsar():
    message_id = wire.MessageIdData(ledger_id=1, entry_id=2)
    assert json.loads(producer_ack(message_id, "c")) == {
        "result": "ok",
        "messageId": encode_message_id(message_id),
        "context": "c",
    }
    assert json.loads(producer_error(WebSocketError.PayloadEncodingError, "bad", None)) == {
        "result": "send-error:7",
        "errorMsg": "bad",
    }


def test_consumer_message_leaves_out_what_is_not_set(utc):
    message = IncomingMessage(wire.MessageIdData(ledger_id=1, entry_id=2), b"x", {}, 1472575557785, 0)
    body = json.loads(consumer_message(message))
    assert set(body) == {"messageId", "payload", "properties", "publishTime", "redeliveryCount"}
    message.event_time, message.key = 1472575557000, "k"
    body = json.loads(consumer_message(message))
    assert (body["eventTime"], body["key"]) == ("2016-08-30T16:45:57Z", "k")


@settings(max_examples=300, deadline=None)
@given(
    properties=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    key=st.none() | st.text(max_size=10),
    payload=st.binary(max_size=40),
    publish_time=st.integers(min_value=0, max_value=2**42),
    event_time=st.integers(min_value=0, max_value=2**42),
    redelivery=st.integers(min_value=0, max_value=2**31),
)
def test_consumer_message_is_what_json_dumps_writes(
    properties, key, payload, publish_time, event_time, redelivery
):
    """Written by hand for speed, it is the text ``json.dumps`` of the object gives."""
    message_id = wire.MessageIdData(ledger_id=7, entry_id=9, partition=2, batch_index=1, batch_size=3)
    message = IncomingMessage(message_id, payload, properties, publish_time, redelivery, event_time, key)
    expected = {
        "messageId": encode_message_id(message_id),
        "payload": base64.b64encode(payload).decode(),
        "properties": properties,
        "publishTime": format_time(publish_time),
        "redeliveryCount": redelivery,
    }
    if event_time:
        expected["eventTime"] = format_time(event_time)
    if key is not None:
        expected["key"] = key
    assert consumer_message(message) == json.dumps(expected)
    for context in (None, "c", 'quote " and \\ and é'):
        ack = {"result": "ok", "messageId": expected["messageId"]}
        if context is not None:
            ack["context"] = context
        assert producer_ack(message_id, context) == json.dumps(ack)


def test_consumer_commands():
    message_id = encode_message_id(wire.MessageIdData(ledger_id=1, entry_id=2))
    assert parse_consumer_command(json.dumps({"messageId": message_id})).type == "ack"
    nack = parse_consumer_command(json.dumps({"type": "negativeAcknowledge", "messageId": message_id}))
    assert nack.type == "negativeAcknowledge" and nack.message_id.entry_id == 2
    assert parse_consumer_command('{"type": "permit", "permitMessages": 3}').permit_messages == 3
    assert parse_consumer_command('{"type": "isEndOfTopic"}').type == "isEndOfTopic"
    for bad in (
        "{",
        '{"type": "jump"}',
        '{"type": "permit"}',
        '{"type": "permit", "permitMessages": 0}',
        "{}",
    ):
        with pytest.raises(BadInput) as refused:
            parse_consumer_command(bad)
        assert refused.value.error is WebSocketError.FailedToDeserializeFromJSON


def test_produce_request():
    request = parse_produce_request(
        json.dumps(
            {
                "producerName": "p",
                "schemaVersion": 2,
                "valueSchema": json.dumps({"type": "JSON", "schema": ""}),
                "messages": [{"payload": "a", "eventTime": "17", "partition": 1, "sequenceId": 4}],
            }
        )
    )
    assert (request.producer_name, request.schema_version, request.value_schema["type"]) == ("p", 2, "JSON")
    ((text, message),) = request.messages
    assert (text, message.event_time, message.partition, message.sequence_id) == ("a", 17, 1, 4)
    assert parse_produce_request('{"messages": [{"payload": "a"}]}').schema_version is None
    for bad in (
        "{",
        "[]",
        '{"messages": []}',
        '{"messages": [1]}',
        '{"messages": [{"payload": "a", "eventTime": "x"}]}',
    ):
        with pytest.raises(ValueError):
            parse_produce_request(bad)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
_values = _json | st.integers(min_value=-(2**70), max_value=2**70) | st.just("\ud800")
_keys = st.sampled_from(
    [
        "payload",
        "properties",
        "context",
        "key",
        "eventTime",
        "sequenceId",
        "messageId",
        "type",
        "permitMessages",
        "messages",
        "schemaVersion",
        "valueSchema",
        "keySchema",
        "producerName",
        "partition",
        "replicationClusters",
    ]
)
_messages = st.dictionaries(_keys, _values, max_size=6)
_bodies = (
    _messages.map(json.dumps)
    | st.lists(_messages, min_size=1, max_size=3).map(lambda m: json.dumps({"messages": m}))
    | st.text(max_size=60)
)


@settings(max_examples=300, deadline=None)
@given(_bodies)
def test_fuzzed_input_is_pulsars_error_or_a_message_that_encodes(text):
    """Nothing but Pulsar's error escapes, and whatever is accepted makes metadata that serializes."""
    try:
        message = parse_producer_message(text)
    except BadInput:
        pass
    else:
        message_metadata(message, "p", message.sequence_id or 0, None).SerializeToString()
    with contextlib.suppress(BadInput):
        parse_consumer_command(text)
    try:
        request = parse_produce_request(text)
    except ValueError:
        pass
    else:
        for _, item in request.messages:
            message_metadata(item, "p", item.sequence_id or 0, None).SerializeToString()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64))
def test_fuzzed_bytes_are_refused_cleanly(data):
    for parse in (parse_producer_message, parse_consumer_command):
        with contextlib.suppress(BadInput):
            parse(data)
    with contextlib.suppress(ValueError):
        parse_produce_request(data)
