"""Schemas with the official client: typed records, versions, compatibility strategies, restarts,
GET_SCHEMA, and the admin v2 schema paths."""

from __future__ import annotations

import json

import _pulsar
import pulsar
import pytest
from pulsar.exceptions import IncompatibleSchema
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, Schema, String

from magnetar.protocol import wire

from .support import RawConnection, admin_call, receive_n

pytestmark = pytest.mark.interop

T = wire.BaseCommand


# The Avro record name comes from the class name, so every version is a class named User.
def user_v1():
    class User(Record):
        name = String()
        age = Integer()

    return User


def user_v2():
    """v1 plus a field with a default: BACKWARD (and FULL) compatible."""

    class User(Record):
        name = String()
        age = Integer()
        email = String(required_default=True)  # "default": null

    return User


def user_age_as_string():
    """``age`` changes type: refused under BACKWARD."""

    class User(Record):
        name = String()
        age = String()

    return User


def user_without_age():
    """``age`` removed (it had no default): fine under BACKWARD, refused under FORWARD."""

    class User(Record):
        name = String()

    return User


class AutoConsume(Schema):
    """A consumer that takes whatever schema the topic has (the bytes as they are)."""

    def __init__(self):
        super().__init__(bytes, _pulsar.SchemaType.AUTO_CONSUME, None, "AUTO_CONSUME")

    def encode(self, obj):
        return obj

    def decode(self, data):
        return data


def version_of(msg) -> int:
    return int.from_bytes(msg.schema_version().encode("latin-1"), "big")


def schemas_path(topic: str) -> str:
    return "/admin/v2/schemas/" + topic.removeprefix("persistent://")


def stored_versions(broker, topic: str) -> list[int]:
    status, body = admin_call(broker, "GET", schemas_path(topic) + "/schemas")
    assert status == 200, body
    return [s["version"] for s in body["getSchemaResponses"]]


def set_strategy(broker, strategy: str) -> None:
    path = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
    assert admin_call(broker, "PUT", path, strategy)[0] == 204


def test_avro_and_json_records_round_trip(client, topic):
    User = user_v1()
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(User))
    producer = client.create_producer(topic, schema=AvroSchema(User))
    for i in range(3):
        producer.send(User(name=f"user-{i}", age=20 + i))
    messages = receive_n(consumer, 3, ack=True)
    assert [(m.value().name, m.value().age) for m in messages] == [(f"user-{i}", 20 + i) for i in range(3)]
    assert [version_of(m) for m in messages] == [0, 0, 0]

    json_topic = topic + "-json"
    json_consumer = client.subscribe(json_topic, "sub", schema=JsonSchema(User))
    json_producer = client.create_producer(json_topic, schema=JsonSchema(User))
    json_producer.send(User(name="j", age=7))
    msg = json_consumer.receive(5000)
    assert (msg.value().name, msg.value().age) == ("j", 7)
    assert json.loads(msg.data()) == {"name": "j", "age": 7}


def test_compatible_evolution_is_version_1_and_old_readers_read_it(broker, client, topic):
    V1, V2 = user_v1(), user_v2()
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(V1))  # idle topic: registers version 0
    old = client.create_producer(topic, schema=AvroSchema(V1))
    new = client.create_producer(topic, schema=AvroSchema(V2))
    old.send(V1(name="old", age=1))
    new.send(V2(name="new", age=2, email="n@example.com"))
    messages = receive_n(consumer, 2, ack=True)
    # The v1 consumer fetches version 1 (GET_SCHEMA) to read the v2 message and drops the new field.
    assert [(m.value().name, m.value().age, version_of(m)) for m in messages] == [
        ("old", 1, 0),
        ("new", 2, 1),
    ]

    status, latest = admin_call(broker, "GET", schemas_path(topic) + "/schema")
    assert status == 200 and latest["version"] == 1 and latest["type"] == "AVRO"
    assert "email" in latest["data"]
    assert stored_versions(broker, topic) == [0, 1]


def test_incompatible_producer_and_consumer_are_refused_and_nothing_is_lost(broker, client, topic):
    V1, Bad = user_v1(), user_age_as_string()
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(V1))
    producer = client.create_producer(topic, schema=AvroSchema(V1))
    producer.send(V1(name="a", age=1))
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Bad))
    with pytest.raises(IncompatibleSchema):
        client.subscribe(topic, "other", schema=AvroSchema(Bad))
    producer.send(V1(name="b", age=2))  # the first producer is unaffected
    assert [m.value().name for m in receive_n(consumer, 2, ack=True)] == ["a", "b"]
    producer.send(V1(name="marker", age=0))  # the next: nothing of the refused ones comes before it
    assert consumer.receive(10_000).value().name == "marker"
    assert stored_versions(broker, topic) == [0]


def test_the_namespace_strategy_set_over_http_decides(broker, client, topic):
    V1, Removed = user_v1(), user_without_age()
    client.create_producer(topic, schema=AvroSchema(V1))
    set_strategy(broker, "FORWARD")
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(Removed))  # v1 readers cannot read it
    set_strategy(broker, "BACKWARD")
    producer = client.create_producer(topic, schema=AvroSchema(Removed))  # the new reader skips age
    consumer = client.subscribe(
        topic, "sub", schema=AvroSchema(Removed), initial_position=pulsar.InitialPosition.Earliest
    )
    producer.send(Removed(name="x"))
    msg = consumer.receive(5000)
    assert (msg.value().name, version_of(msg)) == ("x", 1)
    set_strategy(broker, "ALWAYS_INCOMPATIBLE")
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(user_v2()))
    client.create_producer(topic, schema=AvroSchema(Removed))  # the same schema is no change


def test_schemas_survive_a_restart(broker, client_factory, topic):
    V1, V2 = user_v1(), user_v2()
    client = client_factory(broker.service_url)
    client.create_producer(topic, schema=AvroSchema(V1))
    client.create_producer(topic, schema=AvroSchema(V2))
    client.close()
    broker.stop()
    broker.restart()

    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(V2))
    producer = client.create_producer(topic, schema=AvroSchema(V1))
    producer.send(V1(name="after", age=3))
    msg = consumer.receive(5000)
    assert (msg.value().name, msg.value().email, version_of(msg)) == ("after", None, 0)
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(user_age_as_string()))
    assert stored_versions(broker, topic) == [0, 1]


def test_get_schema_through_the_client_and_auto_consume(client, topic):
    V1, V2 = user_v1(), user_v2()
    producer = client.create_producer(topic, schema=AvroSchema(V1))
    client.create_producer(topic, schema=AvroSchema(V2))
    v0 = client._client.get_schema_info(topic, 0)
    latest = client._client.get_schema_info(topic, -1)
    assert v0.schema_type() == _pulsar.SchemaType.AVRO
    assert [f["name"] for f in json.loads(v0.schema())["fields"]] == ["name", "age"]
    assert [f["name"] for f in json.loads(latest.schema())["fields"]] == ["name", "age", "email"]
    with pytest.raises(pulsar.exceptions.TopicNotFound):
        client._client.get_schema_info(topic + "-without-schema", -1)

    # AUTO_CONSUME is not checked against the topic's schema: it takes the bytes as written.
    consumer = client.subscribe(topic, "auto", schema=AutoConsume())
    producer.send(V1(name="raw", age=5))
    msg = consumer.receive(5000)
    assert AvroSchema(V1).decode(msg.data()).name == "raw"


def test_raw_get_schema_get_or_create_and_errors_keep_the_connection(broker, topic):
    User = user_v1()
    avro_v1 = AvroSchema(User).schema_info().schema().encode()
    bad = AvroSchema(user_age_as_string()).schema_info().schema().encode()
    avro = wire.Schema.Type.Value("Avro")
    cnx = RawConnection(broker.port)
    try:
        cnx.handshake()
        cnx.send_command(wire.CommandGetSchema(request_id=1, topic=topic))
        reply = cnx.expect(T.GET_SCHEMA_RESPONSE).body()
        assert reply.error_code == wire.TopicNotFound and topic in reply.error_message

        cmd = wire.CommandGetOrCreateSchema(
            request_id=2, topic=topic, schema=wire.Schema(name="u", schema_data=avro_v1, type=avro)
        )
        cnx.send_command(cmd)
        reply = cnx.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).body()
        assert not reply.HasField("error_code") and reply.schema_version == bytes(8)

        cmd.request_id, cmd.schema.schema_data = 3, bad
        cnx.send_command(cmd)
        reply = cnx.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).body()
        assert reply.error_code == wire.IncompatibleSchema
        assert "field 'User.age'" in reply.error_message and "BACKWARD" in reply.error_message

        producer = wire.CommandProducer(topic=topic, producer_id=1, request_id=4)
        producer.schema.CopyFrom(wire.Schema(name="u", schema_data=bad, type=avro))
        cnx.send_command(producer)
        error = cnx.expect(T.ERROR).body()
        assert error.error == wire.IncompatibleSchema
        assert "field 'User.age': the writer's int matches no branch" in error.message

        # The connection is still up.
        cnx.send_command(wire.CommandGetSchema(request_id=6, topic=topic, schema_version=bytes(8)))
        reply = cnx.expect(T.GET_SCHEMA_RESPONSE).body()
        assert reply.schema_version == bytes(8) and reply.schema.schema_data == avro_v1
        assert reply.schema.type == avro
        cnx.send_command(
            wire.CommandGetSchema(request_id=7, topic=topic, schema_version=(5).to_bytes(8, "big"))
        )
        assert cnx.expect(T.GET_SCHEMA_RESPONSE).body().error_code == wire.TopicNotFound
    finally:
        cnx.close()


def test_admin_schema_paths(broker, topic):
    path = schemas_path(topic)
    assert admin_call(broker, "GET", f"{path}/schema") == (404, {"reason": "Schema not found"})
    v1 = json.dumps(user_v1().schema())
    v2 = json.dumps(user_v2().schema())
    assert admin_call(
        broker, "POST", f"{path}/schema", {"type": "AVRO", "schema": v1, "properties": {"a": "b"}}
    ) == (
        200,
        {"version": 0},
    )
    assert admin_call(broker, "POST", f"{path}/schema", {"type": "AVRO", "schema": v2}) == (
        200,
        {"version": 1},
    )
    status, got = admin_call(broker, "GET", f"{path}/schema/0")
    assert status == 200
    assert (got["version"], got["type"], got["data"], got["properties"]) == (0, "AVRO", v1, {"a": "b"})
    assert isinstance(got["timestamp"], int) and got["timestamp"] > 0
    assert admin_call(broker, "GET", f"{path}/schema/9")[0] == 404

    bad = {"type": "AVRO", "schema": json.dumps(user_age_as_string().schema())}
    status, body = admin_call(broker, "POST", f"{path}/schema", bad)
    assert status == 409 and "field 'User.age'" in body["reason"]
    assert admin_call(broker, "POST", f"{path}/compatibility", bad) == (
        200,
        {"compatibility": False, "schemaCompatibilityStrategy": "BACKWARD"},
    )
    assert admin_call(broker, "POST", f"{path}/compatibility", {"type": "AVRO", "schema": v2})[1][
        "compatibility"
    ]
    assert admin_call(broker, "POST", f"{path}/version", {"type": "AVRO", "schema": v2}) == (
        200,
        {"version": 1},
    )
    status, body = admin_call(broker, "POST", f"{path}/schema", {"type": "AVRO", "schema": "{nope"})
    assert status == 422 and "not valid JSON" in body["reason"]
    assert admin_call(broker, "POST", f"{path}/schema", {"type": "WHATEVER", "schema": ""})[0] == 400

    assert admin_call(broker, "DELETE", f"{path}/schema") == (200, {"version": 2})
    assert admin_call(broker, "GET", f"{path}/schema") == (404, {"reason": "Schema is deleted"})
    assert admin_call(broker, "GET", f"{path}/schemas") == (200, {"getSchemaResponses": []})
    # After a delete anything valid may start again, as the next version.
    assert admin_call(broker, "POST", f"{path}/schema", {"type": "STRING", "schema": ""}) == (
        200,
        {"version": 3},
    )
    assert admin_call(broker, "GET", "/admin/v2/schemas/public/nowhere/t/schema")[0] == 404


def test_partitions_share_one_schema_history(broker, client, topic):
    assert (
        admin_call(
            broker, "PUT", "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/partitions", 3
        )[0]
        == 204
    )
    V1, V2 = user_v1(), user_v2()
    consumer = client.subscribe(topic, "sub", schema=AvroSchema(V2))
    old = client.create_producer(topic, schema=AvroSchema(V1))  # one PRODUCER per partition
    new = client.create_producer(topic, schema=AvroSchema(V2))
    for i in range(6):
        old.send(V1(name=f"old-{i}", age=i), partition_key=str(i))
        new.send(V2(name=f"new-{i}", age=i, email="e"), partition_key=str(i))
    messages = receive_n(consumer, 12, ack=True)
    assert {m.value().name.split("-")[0]: version_of(m) for m in messages} == {"new": 0, "old": 1}
    assert stored_versions(broker, topic) == [0, 1]
    with pytest.raises(IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(user_age_as_string()))


def test_a_consumer_schema_sets_the_schema_only_on_an_idle_topic(client, topic):
    client.create_producer(topic).send(b"plain bytes")  # no schema, but messages
    with pytest.raises(IncompatibleSchema):
        client.subscribe(topic, "typed", schema=AvroSchema(user_v1()))
    client.subscribe(topic, "auto", schema=AutoConsume())  # not checked
    client.subscribe(topic + "-fresh", "typed", schema=AvroSchema(user_v1()))
    assert client._client.get_schema_info(topic + "-fresh", 0).schema_type() == _pulsar.SchemaType.AVRO
