"""REST produce's schemas and payloads without a network (websocket/rest_schemas.py): SchemaInfo
JSON, KEY_VALUE schemas laid out as Pulsar's KeyValueSchemaInfo, payload text encoded by each type
(AVRO from Avro's JSON encoding), and anything else refused with ValueError alone (hypothesis)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import struct

import fastavro
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.schemas.compatibility import SchemaData, split_key_value, validate
from magnetar.websocket.rest_schemas import (
    ENCODED_TYPES,
    Encoder,
    MessageEncoder,
    key_value_schema,
    parse_schema_info,
)

RECORD = {
    "type": "record",
    "name": "Vehicle",
    "fields": [{"name": "car", "type": "int"}, {"name": "area", "type": ["null", "string"]}],
}
AVRO = SchemaData("AVRO", json.dumps(RECORD).encode())


def test_schema_info_takes_base64_text_or_json_and_names_itself_by_type():
    encoded = base64.b64encode(json.dumps(RECORD).encode()).decode()
    assert parse_schema_info({"type": "avro", "schema": encoded}).schema.data == json.dumps(RECORD).encode()
    assert parse_schema_info({"type": "AVRO", "schema": RECORD}).name == "AVRO"
    assert parse_schema_info({"type": "JSON", "schema": "{}", "name": ""}).name == ""
    for bad in ({"type": "NOPE"}, {"type": "AVRO", "schema": "not avro"}, {"type": "JSON", "properties": 5}):
        with pytest.raises(ValueError):
            parse_schema_info(bad)


def test_key_value_schema_is_laid_out_as_pulsars():
    key = parse_schema_info({"type": "INT32"})
    value = parse_schema_info({"type": "AVRO", "schema": RECORD, "properties": {"a": "b"}})
    kv = key_value_schema(key, value)
    definition = json.dumps(RECORD, separators=(",", ":")).encode()
    assert kv.data == struct.pack(">i", 0) + struct.pack(">i", len(definition)) + definition
    assert dict(kv.properties) == {
        "key.schema.name": "INT32",
        "key.schema.type": "INT32",
        "key.schema.properties": "{}",
        "value.schema.name": "AVRO",
        "value.schema.type": "AVRO",
        "value.schema.properties": '{"a":"b"}',
        "kv.encoding.type": "SEPARATED",
    }
    validate(kv)  # the registry takes it
    assert [s.type for s in split_key_value(kv)] == ["INT32", "AVRO"]


def test_avro_payloads_come_in_avros_json_encoding_and_go_out_in_its_binary_one():
    encoder = Encoder(AVRO)
    data = encoder.encode('{"car": 17, "area": {"string": "north"}}')
    parsed = fastavro.parse_schema(RECORD)
    assert fastavro.schemaless_reader(io.BytesIO(data), parsed) == {"car": 17, "area": "north"}
    assert encoder.encode('{"car": 1, "area": null}') == b"\x02\x00"
    for bad in (
        '{"car": 1, "area": "north"}',
        '{"area": null}',
        "[]",
        "not json",
        '{"car": "x", "area": null}',
    ):
        with pytest.raises(ValueError):
            encoder.encode(bad)


def test_each_type_encodes_its_text_as_pulsars_schemas_write_it():
    cases = {
        "STRING": ("héllo", "héllo".encode()),
        "BYTES": ("raw", b"raw"),
        "INT8": ("-2", b"\xfe"),
        "INT16": ("258", b"\x01\x02"),
        "INT32": ("17", b"\x00\x00\x00\x11"),
        "INT64": ("1", b"\x00" * 7 + b"\x01"),
        "TIMESTAMP": ("1", b"\x00" * 7 + b"\x01"),
        "DOUBLE": ("1.5", struct.pack(">d", 1.5)),
        "FLOAT": ("1.5", struct.pack(">f", 1.5)),
        "BOOLEAN": ("TRUE", b"\x01"),
        "JSON": ('{ "v" : 7 }', b'{"v":7}'),
    }
    for kind, (text, expected) in cases.items():
        assert Encoder(SchemaData(kind)).encode(text) == expected, kind
    with pytest.raises(ValueError):
        Encoder(SchemaData("INT8")).encode("300")
    with pytest.raises(ValueError, match="does not encode PROTOBUF"):
        Encoder(SchemaData("PROTOBUF"))


def test_a_key_value_message_key_is_encoded_by_the_key_schema_in_base64():
    kv = key_value_schema(parse_schema_info({"type": "INT64"}), parse_schema_info({"type": "STRING"}))
    encoder = MessageEncoder(kv)
    assert encoder.encode_key("1") == (base64.b64encode(b"\x00" * 7 + b"\x01").decode(), True)
    assert encoder.value.encode("v") == b"v"
    assert MessageEncoder(SchemaData("STRING")).encode_key("k") == ("k", False)
    with pytest.raises(ValueError):
        encoder.encode_key("one")


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(sorted(ENCODED_TYPES | {"AVRO"})), text=st.text(max_size=60))
def test_any_text_is_encoded_or_refused_with_value_error_only(kind, text):
    encoder = Encoder(AVRO if kind == "AVRO" else SchemaData(kind))
    with contextlib.suppress(ValueError):
        encoder.encode(text)


@settings(max_examples=200, deadline=None)
@given(
    info=st.dictionaries(
        st.sampled_from(["type", "schema", "properties", "name"]),
        st.one_of(
            st.none(),
            st.text(max_size=20),
            st.integers(),
            st.dictionaries(st.text(max_size=5), st.text(max_size=5)),
        ),
    )
)
def test_any_schema_info_is_taken_or_refused_with_value_error_only(info):
    with contextlib.suppress(ValueError):
        parse_schema_info(info)
