"""The schema registry over the metadata store: versions, identity, strategies, deletes, restarts."""

from __future__ import annotations

import json

import pytest

from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.schemas.compatibility import SchemaData
from magnetar.broker.schemas.registry import (
    IncompatibleSchemaError,
    SchemaRegistry,
    StoredSchema,
    from_wire,
    parse_version,
    schema_id,
    to_wire,
    version_bytes,
)
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.metadata_store import MetadataStore

TOPIC = TopicName.parse("persistent://public/default/orders")


def user(*extra_fields) -> SchemaData:
    fields = [{"name": "id", "type": "long"}, *extra_fields]
    return SchemaData("AVRO", json.dumps({"type": "record", "name": "User", "fields": fields}).encode())


@pytest.fixture
def store(tmp_path):
    metadata = MetadataStore(tmp_path / "metadata.sqlite")
    yield metadata
    metadata.close()


@pytest.fixture
def registry(store) -> SchemaRegistry:
    return SchemaRegistry(store, NamespaceRegistry(store))


def test_identical_schema_same_version_different_one_next_version(registry):
    assert registry.add(TOPIC, user()) == 0
    assert registry.add(TOPIC, user()) == 0
    evolved = user({"name": "email", "type": ["null", "string"], "default": None})
    assert registry.add(TOPIC, evolved) == 1
    assert registry.add(TOPIC, user()) == 0, "an older identical version is found again"
    with_props = SchemaData("AVRO", evolved.data, {"owner": "team-a"})
    assert registry.add(TOPIC, with_props) == 2, "properties are part of the identity"
    assert [s.version for s in registry.history(TOPIC)] == [0, 1, 2]
    assert registry.get(TOPIC).properties == {"owner": "team-a"}
    assert registry.get(TOPIC, 1).schema.same_as(evolved)
    assert registry.get(TOPIC, 7) is None


def test_incompatible_schema_is_refused_and_nothing_is_stored(registry):
    registry.add(TOPIC, user())
    with pytest.raises(IncompatibleSchemaError, match=r"'User\.id': long cannot be read as int") as info:
        registry.add(TOPIC, SchemaData("AVRO", user().data.replace(b'"long"', b'"int"')))
    assert info.value.code == wire.IncompatibleSchema
    assert "public/default/orders: BACKWARD" in str(info.value)
    with pytest.raises(IncompatibleSchemaError, match="schema type STRING differs from type AVRO"):
        registry.add(TOPIC, SchemaData("STRING"))
    with pytest.raises(IncompatibleSchemaError, match="invalid AVRO schema"):
        registry.add(TOPIC, SchemaData("AVRO", b"{"))
    assert [s.version for s in registry.history(TOPIC)] == [0]


def test_the_namespace_strategy_decides(registry):
    registry.add(TOPIC, user({"name": "name", "type": "string"}))
    removed = user()
    registry._namespaces.update_policy("public/default", schema_compatibility_strategy="FORWARD")
    assert registry.strategy(TOPIC) == "FORWARD"
    with pytest.raises(IncompatibleSchemaError, match="FORWARD: version 0 cannot read"):
        registry.add(TOPIC, removed)
    registry._namespaces.update_policy("public/default", schema_compatibility_strategy=None)
    assert registry.strategy(TOPIC) == "BACKWARD"
    assert registry.add(TOPIC, removed) == 1


def test_versions_survive_a_restart(store, tmp_path):
    first = SchemaRegistry(store, NamespaceRegistry(store))
    first.add(TOPIC, user())
    first.add(TOPIC, user({"name": "x", "type": "int", "default": 0}))
    store.close()
    reopened = MetadataStore(tmp_path / "metadata.sqlite")
    try:
        again = SchemaRegistry(reopened, NamespaceRegistry(reopened))
        assert [s.version for s in again.history(TOPIC)] == [0, 1]
        assert again.get(TOPIC).schema.same_as(user({"name": "x", "type": "int", "default": 0}))
        assert again.add(TOPIC, user()) == 0
    finally:
        reopened.close()


def test_partitions_share_the_partitioned_topics_schema(registry):
    p0 = TopicName.parse("persistent://public/default/orders-partition-0")
    p3 = TopicName.parse("persistent://public/default/orders-partition-3")
    assert schema_id(p0) == schema_id(TOPIC) == "public/default/orders"
    assert registry.add(p0, user()) == 0
    assert registry.get(p3).version == 0
    assert registry.get(TOPIC).version == 0


def test_delete_leaves_a_tombstone_and_the_next_schema_starts_fresh(registry):
    assert registry.delete(TOPIC) is None
    registry.add(TOPIC, user())
    assert registry.delete(TOPIC) == 1
    assert registry.get(TOPIC) is None
    assert registry.get(TOPIC, 0) is not None, "old versions stay readable by number"
    assert registry.get(TOPIC, 1) is None
    assert registry.live(TOPIC) == []
    # Not checked against version 0 any more: a different type is fine now.
    assert registry.add(TOPIC, SchemaData("STRING")) == 2


def test_consumer_schema_registers_only_on_an_idle_topic(registry):
    with pytest.raises(
        IncompatibleSchemaError, match="no schema to check the consumer's AVRO schema against"
    ):
        registry.check_consumer(TOPIC, user(), idle=False)
    assert registry.check_consumer(TOPIC, user(), idle=True) == 0
    reader = user({"name": "e", "type": "string", "default": ""})
    assert registry.check_consumer(TOPIC, reader, idle=False) is None, "compatible, not registered"
    assert len(registry.history(TOPIC)) == 1
    with pytest.raises(IncompatibleSchemaError, match="consumer schema refused"):
        registry.check_consumer(TOPIC, user({"name": "e", "type": "string"}), idle=False)


def test_wire_conversions():
    assert version_bytes(1) == b"\x00\x00\x00\x00\x00\x00\x00\x01"
    assert parse_version(version_bytes(258)) == 258
    assert parse_version(b"") is None
    assert parse_version(version_bytes(-1)) is None
    schema = wire.Schema(name="x", schema_data=b"{}", type=wire.Schema.Type.Value("Avro"))
    schema.properties.add(key="k", value="v")
    data = from_wire(schema)
    assert data == SchemaData("AVRO", b"{}", {"k": "v"})
    assert (
        from_wire(wire.Schema(name="x", schema_data=b"", type=wire.Schema.Type.Value("Bool"))).type
        == "BOOLEAN"
    )
    out = to_wire("public/default/t", StoredSchema(0, data.type, data.data, dict(data.properties)))
    assert (out.name, out.type, out.schema_data) == (
        "public/default/t",
        wire.Schema.Type.Value("Avro"),
        b"{}",
    )
    assert [(p.key, p.value) for p in out.properties] == [("k", "v")]


def test_get_schema_response(registry):
    registry.add(TOPIC, user())
    reply = registry.get_schema_response(wire.CommandGetSchema(request_id=5, topic=str(TOPIC)))
    assert not reply.HasField("error_code")
    assert reply.schema_version == version_bytes(0)
    assert reply.schema.schema_data == user().data
    cmd = wire.CommandGetSchema(request_id=6, topic=str(TOPIC), schema_version=version_bytes(9))
    reply = registry.get_schema_response(cmd)
    assert reply.error_code == wire.TopicNotFound and "version 9" in reply.error_message
    reply = registry.get_schema_response(wire.CommandGetSchema(request_id=7, topic="persistent://a/b/none"))
    assert reply.error_code == wire.TopicNotFound
    reply = registry.get_schema_response(wire.CommandGetSchema(request_id=8, topic="bad://x"))
    assert reply.error_code == wire.InvalidTopicName
