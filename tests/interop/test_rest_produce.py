"""Pulsar's REST produce API (PIP-64, ``POST /topics/...``) against a real broker, read back with
the official pulsar-client: message ids as Pulsar's ``TopicsBase`` answers them, partitioned topics
(round robin and one partition), schemas, deduplication by sequence id, token auth and
authorization, and bad input (malformed JSON, oversized bodies and messages, unknown partitions)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from tests.interop.support import receive_n

pytestmark = pytest.mark.slow

TIMEOUT_S = 10


def rest_path(topic: str) -> str:
    return topic.replace("persistent://", "persistent/", 1)


def post(broker, topic: str, body: object, suffix: str = "", token: str | None = None) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"{broker.http_url}/topics/{rest_path(topic)}{suffix}", data=data, method="POST", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def admin(broker, method: str, path: str, body: bytes | None = None, token: str | None = None) -> None:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/{path}", data=body, method=method, headers=headers
    )
    urllib.request.urlopen(request, timeout=TIMEOUT_S).read()


def id_text(msg_id: pulsar.MessageId) -> str:
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}:{msg_id.partition()}"


def test_rest_produce_to_official_consumer(broker, client, topic):
    consumer = client.subscribe(topic, "s")
    status, answer = post(
        broker,
        topic,
        {
            "producerName": "rest-device",
            "messages": [
                {
                    "payload": "hello",
                    "key": "car-1",
                    "properties": {"kind": "telemetry"},
                    "eventTime": "1714557600500",
                },
                {"payload": "world"},
            ],
        },
    )
    assert status == 200, answer
    results = answer["messagePublishResults"]
    assert [r["errorCode"] for r in results] == [0, 0]
    assert answer["schemaVersion"] == 0  # the STRING schema Pulsar registers when none is given
    first, second = receive_n(consumer, 2, ack=True)
    assert (first.data(), first.partition_key(), first.properties()) == (
        b"hello",
        "car-1",
        {"kind": "telemetry"},
    )
    assert first.event_timestamp() == 1714557600500
    assert second.data() == b"world"
    assert [r["messageId"] for r in results] == [id_text(first.message_id()), id_text(second.message_id())]


def test_rest_produce_partitioned_round_robin_and_one_partition(broker, client, topic):
    admin(broker, "PUT", f"{rest_path(topic)}/partitions", b"3")
    consumer = client.subscribe(topic, "s")
    status, answer = post(broker, topic, {"messages": [{"payload": f"m{i}"} for i in range(6)]})
    assert status == 200, answer
    partitions = [int(r["messageId"].split(":")[2]) for r in answer["messagePublishResults"]]
    assert partitions == [0, 1, 2, 0, 1, 2]
    status, answer = post(broker, topic, {"messages": [{"payload": "only-2"}]}, suffix="/partitions/2")
    assert status == 200 and answer["messagePublishResults"][0]["messageId"].endswith(":2"), answer
    got = receive_n(consumer, 7, ack=True)
    assert sorted(m.data() for m in got) == sorted([f"m{i}".encode() for i in range(6)] + [b"only-2"])
    assert post(broker, topic, {"messages": [{"payload": "x"}]}, suffix="/partitions/3")[0] == 404
    # A message for a partition the topic lacks is refused alone, its messageId that partition.
    status, answer = post(broker, topic, {"messages": [{"payload": "x", "partition": 7}]})
    assert answer["messagePublishResults"][0]["messageId"] == "7", answer


def test_rest_produce_json_schema(broker, client, topic):
    definition = {"type": "record", "name": "Reading", "fields": [{"name": "v", "type": "int"}]}
    schema = {
        "type": "JSON",
        "schema": base64.b64encode(json.dumps(definition).encode()).decode(),
        "properties": {},
    }
    status, answer = post(
        broker, topic, {"valueSchema": json.dumps(schema), "messages": [{"payload": '{"v": 7}'}]}
    )
    assert status == 200, answer
    assert answer["messagePublishResults"][0]["errorCode"] == 0
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert json.loads(receive_n(consumer, 1)[0].data()) == {"v": 7}
    # The same schema by its version; a version that does not exist is refused.
    status, answer = post(broker, topic, {"schemaVersion": 0, "messages": [{"payload": '{"v": 8}'}]})
    assert status == 200 and answer["schemaVersion"] == 0, answer
    assert post(broker, topic, {"schemaVersion": 9, "messages": [{"payload": "{}"}]})[0] == 404
    # A payload that is not JSON is refused alone, in Pulsar's shape: the partition index (-1:
    # not partitioned) as its messageId, errorCode 2 and errorMsg.
    status, answer = post(
        broker, topic, {"schemaVersion": 0, "messages": [{"payload": "nope"}, {"payload": "{}"}]}
    )
    refused, stored = answer["messagePublishResults"]
    assert set(refused) == {"errorMsg", "messageId", "errorCode", "schemaVersion"}, refused
    assert (refused["messageId"], refused["errorCode"]) == ("-1", 2)
    assert "not a JSON value" in refused["errorMsg"]
    assert stored["errorCode"] == 0


class Vehicle(Record):
    car = Integer()
    area = String()


def test_rest_produce_avro_schema_read_by_the_official_avro_consumer(broker, client, topic):
    """An AVRO record given in Avro's JSON encoding (a union's value as {"type": value}), stored
    in Avro's binary encoding: the official client's AvroSchema reads it."""
    definition = AvroSchema(Vehicle).schema_info().schema()
    value_schema = {"type": "AVRO", "schema": base64.b64encode(definition.encode()).decode()}
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Vehicle))
    messages = [
        {"payload": '{"car": {"int": 17}, "area": {"string": "north"}}'},
        {"payload": '{"car": {"int": 18}, "area": null}'},
        {"payload": '{"car": 18, "area": null}'},  # a union's value without its branch
    ]
    status, answer = post(broker, topic, {"valueSchema": json.dumps(value_schema), "messages": messages})
    assert status == 200, answer
    first, second, refused = answer["messagePublishResults"]
    assert (first["errorCode"], second["errorCode"]) == (0, 0)
    assert (refused["messageId"], refused["errorCode"]) == ("-1", 2)
    assert "not a AVRO value" in refused["errorMsg"]
    got = [m.value() for m in receive_n(consumer, 2, ack=True)]
    assert [(v.car, v.area) for v in got] == [(17, "north"), (18, None)]


def test_rest_produce_key_value_schema(broker, client, topic):
    """keySchema and valueSchema make a SEPARATED KEY_VALUE schema, as Pulsar's: the key encoded by
    its schema and carried base64 in the partition key, the value by its own in the payload."""
    definition = {"type": "record", "name": "Speed", "fields": [{"name": "speed", "type": "int"}]}
    value_schema = {"type": "JSON", "schema": json.dumps(definition), "properties": {"owner": "city"}}
    body = {
        "keySchema": json.dumps({"type": "INT32", "schema": ""}),
        "valueSchema": json.dumps(value_schema),
        "messages": [
            {"key": "17", "payload": '{"speed": 48}'},
            {"key": "not a number", "payload": "{}"},
        ],
    }
    consumer = client.subscribe(topic, "s")
    status, answer = post(broker, topic, body)
    assert status == 200, answer
    stored, refused = answer["messagePublishResults"]
    assert stored["errorCode"] == 0
    assert refused["errorCode"] == 2 and "the key is not a INT32 value" in refused["errorMsg"]
    message = receive_n(consumer, 1, ack=True)[0]
    assert json.loads(message.data()) == {"speed": 48}
    assert base64.b64decode(message.partition_key()) == (17).to_bytes(4, "big")
    path = topic.replace("persistent://", "")
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/schemas/{path}/schema", timeout=TIMEOUT_S) as r:
        schema = json.loads(r.read())
    assert schema["type"] == "KEY_VALUE"
    assert {k: v for k, v in schema["properties"].items() if k.startswith(("key.", "value.", "kv."))} == {
        "key.schema.name": "INT32",
        "key.schema.type": "INT32",
        "key.schema.properties": "{}",
        "value.schema.name": "JSON",
        "value.schema.type": "JSON",
        "value.schema.properties": '{"owner":"city"}',
        "kv.encoding.type": "SEPARATED",
    }


def test_rest_produce_deduplicates_by_sequence_id(broker_factory, client_factory, topic):
    broker = broker_factory({"deduplication_enabled": True})
    consumer = client_factory(broker.service_url).subscribe(topic, "s")
    body = {
        "producerName": "gateway",
        "messages": [{"payload": "a", "sequenceId": 1}, {"payload": "b", "sequenceId": 2}],
    }
    assert post(broker, topic, body)[0] == 200
    status, answer = post(broker, topic, body)  # sent again: nothing stored twice
    assert status == 200
    assert [r["messageId"] for r in answer["messagePublishResults"]] == ["-1:-1:-1", "-1:-1:-1"]
    post(broker, topic, {"producerName": "gateway", "messages": [{"payload": "c", "sequenceId": 3}]})
    assert [m.data() for m in receive_n(consumer, 3, ack=True)] == [b"a", b"b", b"c"]


def test_rest_produce_bad_input(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": 10_000})
    consumer = client_factory(broker.service_url).subscribe(topic, "s")
    assert post(broker, topic, b"{not json")[0] == 400
    assert post(broker, topic, {"messages": []})[0] == 400
    assert post(broker, topic, {"messages": [{"payload": 5}]})[0] == 400
    assert post(broker, topic, {"messages": [{"payload": "x"}], "valueSchema": {"type": "NOPE"}})[0] == 400
    # A body past what a message of max_message_size can take in JSON (6 bytes a byte) and 1 MiB
    # is refused before it is all read.
    assert post(broker, topic, b" " * (6 * 10_000 + 1024 * 1024 + 1))[0] == 413
    status, answer = post(broker, topic, {"messages": [{"payload": "y" * 20_000}, {"payload": "fits"}]})
    assert status == 200
    big, small = answer["messagePublishResults"]
    assert big["errorCode"] == 2 and "maximum message size" in big["errorMsg"], big
    assert small["errorCode"] == 0
    assert [m.data() for m in receive_n(consumer, 1)] == [b"fits"]


def escaped_near_limit(max_message_size: int) -> str:
    """A payload just under ``max_message_size`` whose every character JSON escapes in 6 bytes."""
    return "\x01" * (max_message_size - 2_000)


def test_rest_produce_a_message_close_to_max_message_size(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": 1_500_000})
    consumer = client_factory(broker.service_url).subscribe(topic, "s")
    text = escaped_near_limit(1_500_000)
    body = json.dumps({"messages": [{"payload": text}]}).encode()
    assert len(body) > 8_000_000  # far past aiohttp's 1 MiB default
    status, answer = post(broker, topic, body)
    assert status == 200 and answer["messagePublishResults"][0]["errorCode"] == 0, answer
    assert receive_n(consumer, 1, ack=True)[0].data() == text.encode()


def test_rest_produce_token_auth_and_authorization(broker_factory, topic):
    from magnetar.security import tokens

    key = tokens.create_secret_key()
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "authorization_enabled": True,
            "superuser_roles": ["admin"],
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
        }
    )
    admin_token = tokens.create_token(key, "admin", 600)
    device = tokens.create_token(key, "device", 600)
    body = {"messages": [{"payload": "secured"}]}
    assert post(broker, topic, body)[0] == 401
    assert post(broker, topic, body, token="not-a-token")[0] == 401
    # A role without produce: 401, as Pulsar's TopicsBase answers (not the 403 of other paths).
    status, answer = post(broker, topic, body, token=device)
    assert status == 401 and "Unauthorized to produce to topic" in answer["reason"], answer
    admin(broker, "POST", "namespaces/public/default/permissions/device", b'["produce"]', token=admin_token)
    status, answer = post(broker, topic, body, token=device)
    assert status == 200 and answer["messagePublishResults"][0]["errorCode"] == 0, answer
    client = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(admin_token))
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(TIMEOUT_S * 1000).data() == b"secured"
    finally:
        client.close()
