"""REST produce's schemas and payloads, as Pulsar's ``TopicsBase`` reads them (no I/O).

A request names its schema as ``SchemaInfo`` JSON (``valueSchema``, and ``keySchema`` for a
KEY_VALUE schema), or a ``schemaVersion`` the topic has; none is a STRING schema. A ``keySchema``
makes a KEY_VALUE schema of the two, ``SEPARATED`` (the key in the message's partition key),
encoded as Pulsar's ``KeyValueSchemaInfo`` does: the data ``[length][key schema][length][value
schema]`` (big-endian 32-bit lengths), and the properties ``key.schema.name|type|properties``,
``value.schema.name|type|properties`` (the sub-schemas' properties as JSON) and
``kv.encoding.type``.

Payloads (and a KEY_VALUE message's key) are text, encoded by their schema as Pulsar's
``encodeWithSchema`` does: UTF-8 for STRING and BYTES, a number for INT8..INT64, FLOAT, DOUBLE,
TIME and TIMESTAMP (big-endian, as Pulsar's schemas write them), ``true``/``false`` for BOOLEAN, the
JSON text for JSON, and for AVRO the record in Avro's JSON encoding (a union's value as
``{"type": value}``), written in Avro's binary encoding by the schema's definition. A KEY_VALUE
message's key is encoded by the key schema and carried base64 in the partition key
(``partition_key_b64_encoded``), as Pulsar's clients read it.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from magnetar.broker.schemas.compatibility import SchemaData, split_key_value
from magnetar.broker.schemas.errors import InvalidSchema
from magnetar.broker.schemas.registry import TYPE_NAMES

#: KEY_VALUE's layout: the key in the partition key, the value in the payload (Pulsar's REST choice).
SEPARATED = "SEPARATED"
#: Types a payload's text can be encoded in.
_PACKED = {"INT8": ">b", "INT16": ">h", "INT32": ">i", "INT64": ">q", "TIME": ">q", "TIMESTAMP": ">q"}
_FLOATS = {"FLOAT": ">f", "DOUBLE": ">d"}
_TEXT = frozenset({"STRING", "BYTES", "NONE"})
ENCODED_TYPES = frozenset({*_TEXT, "JSON", "AVRO", "BOOLEAN", *_PACKED, *_FLOATS})
#: What decoding an Avro record from text may raise (fastavro's errors are not one class).
_AVRO_ERRORS = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError, StopIteration)


@dataclass(frozen=True, slots=True)
class NamedSchema:
    """A ``SchemaInfo`` of a request: its name (the type's when it names none) and schema."""

    name: str
    schema: SchemaData


def parse_schema_info(info: Mapping[str, Any]) -> NamedSchema:
    """A ``SchemaInfo`` given as JSON (ValueError for one that is not)."""
    kind = str(info.get("type", "")).upper()
    if kind not in TYPE_NAMES:
        raise ValueError(f"unknown schema type {info.get('type')!r}")
    properties = info.get("properties") or {}
    if not isinstance(properties, dict):
        raise ValueError("a SchemaInfo's properties must be an object")
    name = info.get("name")
    named = NamedSchema(
        kind if name is None else str(name),
        SchemaData(kind, _schema_data(info), {str(k): str(v) for k, v in properties.items()}),
    )
    if kind == "AVRO":
        avro_schema(named.schema.data)  # ValueError now rather than for each message
    return named


def _schema_data(info: Mapping[str, Any]) -> bytes:
    """A ``SchemaInfo``'s ``schema``: base64 (Jackson's bytes), or the definition as text or JSON."""
    value = info.get("schema")
    if value in (None, ""):
        return b""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":")).encode()
    if not isinstance(value, str):
        raise ValueError("a SchemaInfo's schema must be base64, text or JSON")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:  # binascii.Error, or not ASCII: the definition itself
        return value.encode()


def key_value_schema(key: NamedSchema, value: NamedSchema) -> SchemaData:
    """The KEY_VALUE schema of ``key`` and ``value`` (``SEPARATED``), as Pulsar encodes it."""
    data = b"".join(struct.pack(">i", len(part)) + part for part in (key.schema.data, value.schema.data))
    properties = {"kv.encoding.type": SEPARATED}
    for side, named in (("key", key), ("value", value)):
        properties[f"{side}.schema.name"] = named.name
        properties[f"{side}.schema.type"] = named.schema.type
        properties[f"{side}.schema.properties"] = json.dumps(
            dict(named.schema.properties), separators=(",", ":")
        )
    return SchemaData("KEY_VALUE", data, properties)


def avro_schema(definition: bytes) -> Any:
    """An AVRO schema's definition, parsed (ValueError if it is not one)."""
    import fastavro  # only for AVRO: the HTTP port starts without it (issue 40, start-up)

    try:
        return fastavro.parse_schema(json.loads(definition))
    except (ValueError, TypeError, KeyError, AttributeError, fastavro.schema.SchemaParseException) as exc:
        raise ValueError(f"the AVRO schema does not parse: {exc}") from None


class Encoder:
    """One schema's text to bytes (Pulsar's ``encodeWithSchema``)."""

    def __init__(self, schema: SchemaData) -> None:
        if schema.type not in ENCODED_TYPES:
            known = ", ".join(sorted(ENCODED_TYPES))
            raise ValueError(f"REST produce does not encode {schema.type} payloads (it does {known})")
        self.type = schema.type
        self._avro: Any = avro_schema(schema.data) if schema.type == "AVRO" else {}

    def encode(self, text: str) -> bytes:
        """ValueError when ``text`` is not a value of the schema's type."""
        kind = self.type
        if kind in _TEXT:
            return text.encode()
        if kind == "JSON":
            return json.dumps(json.loads(text), separators=(",", ":")).encode()
        if kind == "AVRO":
            return self._encode_avro(text)
        if kind == "BOOLEAN":
            return b"\x01" if text.strip().lower() == "true" else b"\x00"
        if kind in _FLOATS:
            return struct.pack(_FLOATS[kind], float(text))
        try:
            return struct.pack(_PACKED[kind], int(text))
        except struct.error as exc:
            raise ValueError(f"{text!r} is out of range for {kind}: {exc}") from None

    def _encode_avro(self, text: str) -> bytes:
        """A record in Avro's JSON encoding, written in its binary encoding."""
        import fastavro

        try:
            line = json.dumps(json.loads(text))  # one datum on one line, as the reader takes it
            record = next(iter(fastavro.json_reader(io.StringIO(line), self._avro)))
            out = io.BytesIO()
            fastavro.schemaless_writer(out, self._avro, record)
        except _AVRO_ERRORS as exc:
            raise ValueError(f"not a record of the AVRO schema: {exc}") from None
        return out.getvalue()


class MessageEncoder:
    """A request's payloads, and with a KEY_VALUE schema its keys."""

    def __init__(self, schema: SchemaData) -> None:
        self.key: Encoder | None = None
        if schema.type == "KEY_VALUE":
            try:
                key, value = split_key_value(schema)
            except InvalidSchema as exc:
                raise ValueError(str(exc)) from None
            self.key = Encoder(key)
            schema = value
        self.value = Encoder(schema)

    @property
    def type(self) -> str:
        return self.value.type

    def encode_key(self, key: str) -> tuple[str, bool]:
        """The partition key and whether it is base64 (a KEY_VALUE key, encoded by its schema)."""
        if self.key is None:
            return key, False
        return base64.b64encode(self.key.encode(key)).decode(), True
