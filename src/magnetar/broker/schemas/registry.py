"""Schemas per topic, versioned and durable in the metadata store (Pulsar's schema registry).

A topic's schemas are kept under its *schema id*, Pulsar's schema name ``tenant/namespace/topic``
(the partitioned topic's for a partition, so all partitions share one history). Each version
is one key/value entry ``schema/<id>/<version, zero-padded>`` holding JSON (type, base64 data,
properties, timestamp, deleted), so versions survive restarts. Versions count from 0; a
delete adds a tombstone version, after which the topic has no schema until a new one is
registered (with the next version number, checked only against versions after the delete).

Registering a schema identical (type, data, properties) to a live version answers that
version; another one is checked against the namespace's ``schema_compatibility_strategy``
(default BACKWARD) and stored as the next version, or refused with
:class:`IncompatibleSchemaError` (ServerError ``IncompatibleSchema``).

On the wire a version is Pulsar's: an 8-byte big-endian long.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.schemas import compatibility
from magnetar.broker.schemas.compatibility import DEFAULT_STRATEGY, InvalidSchema, SchemaData, SchemaError
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.namespaces import NamespaceRegistry

_PREFIX = "schema/"

#: Pulsar's SchemaType names for the protocol's Schema.Type values.
_WIRE_TO_NAME = {
    "None": "NONE",
    "String": "STRING",
    "Json": "JSON",
    "Protobuf": "PROTOBUF",
    "Avro": "AVRO",
    "Bool": "BOOLEAN",
    "Int8": "INT8",
    "Int16": "INT16",
    "Int32": "INT32",
    "Int64": "INT64",
    "Float": "FLOAT",
    "Double": "DOUBLE",
    "Date": "DATE",
    "Time": "TIME",
    "Timestamp": "TIMESTAMP",
    "KeyValue": "KEY_VALUE",
    "Instant": "INSTANT",
    "LocalDate": "LOCAL_DATE",
    "LocalTime": "LOCAL_TIME",
    "LocalDateTime": "LOCAL_DATE_TIME",
    "ProtobufNative": "PROTOBUF_NATIVE",
    "AutoConsume": "AUTO_CONSUME",
    "External": "EXTERNAL",
}
TYPE_NAMES = frozenset(_WIRE_TO_NAME.values()) | {"BYTES"}
_NAME_TO_WIRE = {name: wire.Schema.Type.Value(w) for w, name in _WIRE_TO_NAME.items()} | {
    "BYTES": wire.Schema.Type.Value("None")
}
#: Schema types that mean "no schema": plain bytes, and a consumer that takes any schema.
NO_SCHEMA = frozenset({"NONE", "BYTES", "AUTO_CONSUME"})


class IncompatibleSchemaError(BrokerError):
    code = wire.IncompatibleSchema


class InvalidSchemaDataError(IncompatibleSchemaError):
    """The schema data cannot be parsed (clients see IncompatibleSchema too, as from Pulsar)."""


@dataclass(frozen=True)
class StoredSchema:
    version: int
    type: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: int = 0
    deleted: bool = False

    @property
    def schema(self) -> SchemaData:
        return SchemaData(self.type, self.data, self.properties)

    def to_json(self) -> str:
        return json.dumps(
            {
                "type": self.type,
                "data": base64.b64encode(self.data).decode(),
                "properties": self.properties,
                "timestamp": self.timestamp,
                "deleted": self.deleted,
            }
        )

    @classmethod
    def from_json(cls, version: int, raw: str) -> StoredSchema:
        doc = json.loads(raw)
        return cls(
            version,
            doc["type"],
            base64.b64decode(doc["data"]),
            dict(doc.get("properties") or {}),
            int(doc.get("timestamp", 0)),
            bool(doc.get("deleted", False)),
        )


# -- the wire ------------------------------------------------------------------------------------------------


def version_bytes(version: int) -> bytes:
    return struct.pack(">q", version)


def parse_version(data: bytes) -> int | None:
    """A version from the wire; None (the latest) for empty bytes or a negative number."""
    if not data:
        return None
    if len(data) != 8:
        raise BrokerError(f"a schema version is 8 bytes, got {len(data)}", wire.InvalidTopicName)
    (version,) = struct.unpack(">q", data)
    return version if version >= 0 else None


def from_wire(schema: wire.Schema) -> SchemaData:
    name = _WIRE_TO_NAME.get(wire.Schema.Type.Name(schema.type), "NONE")
    return SchemaData(name, bytes(schema.schema_data), {kv.key: kv.value for kv in schema.properties})


def to_wire(schema_id: str, stored: StoredSchema) -> wire.Schema:
    out = wire.Schema(
        name=schema_id, schema_data=stored.data, type=_NAME_TO_WIRE.get(stored.type, _NAME_TO_WIRE["BYTES"])
    )
    for key, value in sorted(stored.properties.items()):
        out.properties.add(key=key, value=value)
    return out


def schema_id(topic: TopicName) -> str:
    """Pulsar's schema name: ``tenant/namespace/topic`` of the partitioned topic for a partition."""
    base = topic.partitioned_base() or topic
    return f"{base.tenant}/{base.namespace}/{base.local_name}"


# -- the registry --------------------------------------------------------------------------------------------


class SchemaRegistry:
    """Versions are cached per schema id; with workers, another process may add one meanwhile:
    a version is stored only if its key is new (``put_new``; else the cache is read again and the
    schema checked against what is there now), and each change is announced (``changed``) so the
    other workers drop their cached history (``forget``)."""

    def __init__(self, metadata, namespaces: NamespaceRegistry) -> None:
        self._kv = metadata
        self._namespaces = namespaces
        self._cache: dict[str, list[StoredSchema]] = {}
        #: Tells the other brokers sharing the store (ownership.OwnershipStore.publish_change).
        self.changed: Callable[[str], None] = lambda path: None

    def forget(self, sid: str | None = None) -> None:
        """Drop the cached versions of schema ``sid`` (all if None): another broker changed them."""
        if sid is None:
            self._cache.clear()
        else:
            self._cache.pop(sid, None)

    # -- reading --
    def history(self, topic: TopicName) -> list[StoredSchema]:
        """Every version of the topic's schema (tombstones of deletes included), oldest first."""
        sid = schema_id(topic)
        versions = self._cache.get(sid)
        if versions is None:
            prefix = f"{_PREFIX}{sid}/"
            versions = []
            for key in self._kv.keys(prefix):
                raw = self._kv.get(key)
                if raw is not None:
                    versions.append(StoredSchema.from_json(int(key[len(prefix) :]), raw))
            versions.sort(key=lambda s: s.version)
            self._cache[sid] = versions
        return versions

    def live(self, topic: TopicName) -> list[StoredSchema]:
        """The versions after the last delete, oldest first (what new schemas are checked against)."""
        versions = self.history(topic)
        for i in range(len(versions) - 1, -1, -1):
            if versions[i].deleted:
                return versions[i + 1 :]
        return list(versions)

    def get(self, topic: TopicName, version: int | None = None) -> StoredSchema | None:
        """The latest schema (None if none or deleted), or the given version (None if unknown or a delete)."""
        versions = self.history(topic)
        if version is None:
            found = versions[-1] if versions else None
        else:
            found = next((s for s in versions if s.version == version), None)
        return None if found is None or found.deleted else found

    def strategy(self, topic: TopicName) -> str:
        policy = self._namespaces.policies(topic.namespace_name).schema_compatibility_strategy
        return policy or DEFAULT_STRATEGY

    def find_version(self, topic: TopicName, schema: SchemaData) -> int | None:
        """The live version identical to ``schema``, if any."""
        return next((s.version for s in self.live(topic) if s.schema.same_as(schema)), None)

    # -- changing --
    def add(self, topic: TopicName, schema: SchemaData) -> int:
        """Register ``schema`` (as a producer does): its version, new or existing.

        Raises :class:`IncompatibleSchemaError` when the strategy refuses it or its data is invalid.
        """
        while True:
            found = self.find_version(topic, schema)
            if found is not None:
                return found
            self.check(topic, schema)
            version = self._append(topic, schema, deleted=False)
            if version is not None:
                return version

    def check(self, topic: TopicName, schema: SchemaData) -> None:
        """Whether ``schema`` could be registered now (IncompatibleSchemaError if not)."""
        if schema.type not in TYPE_NAMES:
            raise InvalidSchemaDataError(f"unknown schema type {schema.type!r}")
        live = [(s.version, s.schema) for s in self.live(topic)]
        try:
            compatibility.check(self.strategy(topic), schema, live)
        except InvalidSchema as exc:
            raise InvalidSchemaDataError(f"{schema_id(topic)}: {exc}") from None
        except SchemaError as exc:
            raise IncompatibleSchemaError(f"{schema_id(topic)}: {exc}") from None

    def check_consumer(self, topic: TopicName, schema: SchemaData, idle: bool) -> int | None:
        """A consumer's schema (Pulsar's rule): registered when the topic has no schema and is idle
        (no producers, no consumers, no messages); refused when it has no schema but is in use;
        else checked against the topic's schema (see ``compatibility.check_consumer``)."""
        live = self.live(topic)
        if not live:
            if idle:
                return self.add(topic, schema)
            raise IncompatibleSchemaError(
                f"{schema_id(topic)}: the topic has no schema to check the consumer's {schema.type} "
                "schema against, and it is in use (producers, consumers or messages)"
            )
        found = self.find_version(topic, schema)
        try:
            compatibility.validate(schema)
        except InvalidSchema as exc:
            raise InvalidSchemaDataError(f"{schema_id(topic)}: {exc}") from None
        try:
            compatibility.check_consumer(self.strategy(topic), schema, [(s.version, s.schema) for s in live])
        except SchemaError as exc:
            raise IncompatibleSchemaError(f"{schema_id(topic)}: consumer schema refused: {exc}") from None
        return found

    def delete(self, topic: TopicName) -> int | None:
        """Delete the topic's schema (a tombstone version); its version, or None if there was none."""
        while self.get(topic) is not None:
            version = self._append(topic, SchemaData("NONE"), deleted=True)
            if version is not None:
                return version
        return None

    def _append(self, topic: TopicName, schema: SchemaData, deleted: bool) -> int | None:
        """Store the next version; None (the cache dropped) if another broker stored it first."""
        versions = self.history(topic)
        version = versions[-1].version + 1 if versions else 0
        stored = StoredSchema(
            version,
            schema.type,
            bytes(schema.data),
            dict(schema.properties),
            int(time.time() * 1000),
            deleted,
        )
        sid = schema_id(topic)
        if not self._kv.put_new(f"{_PREFIX}{sid}/{version:020d}", stored.to_json()):
            self.forget(sid)
            return None
        versions.append(stored)
        self.changed(f"{_PREFIX}{sid}")
        return version

    # -- the protocol's commands --
    def for_producer(self, topic: TopicName, schema: wire.Schema | None) -> bytes | None:
        """PRODUCER: the schema version to answer (None for a producer without a schema)."""
        if schema is None:
            return None
        data = from_wire(schema)
        if data.type in NO_SCHEMA:
            return None
        return version_bytes(self.add(topic, data))

    def for_subscribe(self, topic, schema: wire.Schema) -> None:
        """SUBSCRIBE with a schema: IncompatibleSchemaError unless the consumer may use it."""
        data = from_wire(schema)
        if data.type in NO_SCHEMA:
            return
        self.check_consumer(topic.name, data, topic_is_idle(topic))

    def get_schema_response(self, cmd: wire.CommandGetSchema) -> wire.CommandGetSchemaResponse:
        """GET_SCHEMA: the latest schema or the asked version, else TopicNotFound (as Pulsar answers)."""
        reply = wire.CommandGetSchemaResponse(request_id=cmd.request_id)
        try:
            topic = TopicName.parse(cmd.topic)
            version = parse_version(cmd.schema_version) if cmd.HasField("schema_version") else None
        except ValueError as exc:
            reply.error_code = wire.InvalidTopicName
            reply.error_message = str(exc)
            return reply
        except BrokerError as exc:
            reply.error_code = wire.ServerError.ValueType(exc.code)
            reply.error_message = str(exc)
            return reply
        stored = self.get(topic, version)
        if stored is None:
            reply.error_code = wire.TopicNotFound
            which = "" if version is None else f" version {version}"
            reply.error_message = f"Topic not found or no-schema{which}: {cmd.topic}"
            return reply
        reply.schema.CopyFrom(to_wire(schema_id(topic), stored))
        reply.schema_version = version_bytes(stored.version)
        return reply


def topic_is_idle(topic: Any) -> bool:
    """No producers, no connected consumers, no stored messages: a consumer may set the schema."""
    if topic.producers:
        return False
    if any(sub.consumers for sub in topic.subscriptions.values()):
        return False
    ml = getattr(topic, "ml", None)
    return ml is None or all(info.entries == 0 for info in ml.ledgers())
