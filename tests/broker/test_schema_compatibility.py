"""Avro schema resolution and Pulsar's compatibility strategies, on crafted schemas."""

from __future__ import annotations

import json
import struct

import pytest

from magnetar.broker.schemas.compatibility import (
    STRATEGIES,
    IncompatibleSchema,
    InvalidSchema,
    SchemaData,
    check,
    check_consumer,
    parse_avro,
    read_problems,
    validate,
)


def record(*fields, name="User", **extra) -> dict:
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name, type_, **extra) -> dict:
    return {"name": name, "type": type_, **extra}


def avro(doc, kind="AVRO") -> SchemaData:
    return SchemaData(kind, json.dumps(doc).encode())


def problems(reader, writer) -> list[str]:
    return read_problems(parse_avro(json.dumps(reader)), parse_avro(json.dumps(writer)))


def ok(strategy, new, *old):
    check(strategy, new, list(enumerate(old)))


def refused(strategy, new, *old) -> str:
    with pytest.raises(IncompatibleSchema) as info:
        check(strategy, new, list(enumerate(old)))
    return str(info.value)


# -- parsing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"42", "not an Avro schema"),
        (b'{"name": "X"}', "without a 'type'"),
        (b'"Nope"', "unknown type 'Nope'"),
        (b'{"type": "object", "properties": {}}', "unknown type 'object'"),
        (b'{"type": "record", "name": "R"}', "needs a 'fields' list"),
        (b'{"type": "record", "fields": []}', "without a 'name'"),
        (b'{"type": "record", "name": "R", "fields": [{"type": "int"}]}', "field without a name"),
        (b'{"type": "record", "name": "R", "fields": [{"name": "a"}]}', "has no 'type'"),
        (
            json.dumps(record(f("a", "int"), f("a", "int"))).encode(),
            "two fields named 'a'",
        ),
        (b'{"type": "enum", "name": "E", "symbols": ["A"], "default": "B"}', "default 'B' is not one"),
        (b'{"type": "enum", "name": "E", "symbols": ["A", "A"]}', "duplicate symbols"),
        (b'{"type": "enum", "name": "E"}', "'symbols' list"),
        (b'{"type": "fixed", "name": "F"}', "'size'"),
        (b'{"type": "array"}', "without 'items'"),
        (b'{"type": "map"}', "without 'values'"),
        (b'["null", ["int", "string"]]', "union cannot directly contain another union"),
        (
            json.dumps(record(f("a", {"type": "fixed", "name": "User", "size": 1}))).encode(),
            "defined twice",
        ),
    ],
)
def test_unparsable_schema_data_is_refused_with_a_clear_error(data, says):
    with pytest.raises(InvalidSchema, match=says):
        validate(SchemaData("AVRO", data))


def test_invalid_new_schema_is_refused_even_on_an_empty_topic():
    with pytest.raises(InvalidSchema, match="invalid JSON schema"):
        check("BACKWARD", SchemaData("JSON", b"{oops"), [])
    with pytest.raises(InvalidSchema, match="invalid AVRO schema"):
        check("ALWAYS_COMPATIBLE", SchemaData("AVRO", b""), [(0, SchemaData("AVRO", b'"int"'))])


def test_names_namespaces_references_and_recursion_parse():
    doc = record(
        f("next", ["null", "Node"]),
        f("kind", {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}),
        f("again", "com.example.Kind"),
        f("ts", {"type": "long", "logicalType": "timestamp-millis"}),
        f("digest", {"type": "fixed", "name": "MD5", "size": 16}),
        f("digest2", "MD5"),
        name="Node",
        namespace="com.example",
    )
    node = parse_avro(json.dumps(doc))
    assert node.fullname == "com.example.Node"
    assert node.fields[0].type.branches[1] is node
    assert node.fields[2].type is node.fields[1].type
    assert read_problems(node, node) == []


def test_unknown_strategy_is_an_error():
    with pytest.raises(InvalidSchema, match="unknown schema compatibility strategy"):
        check("SOMETIMES", SchemaData("STRING"), [])


# -- resolution rules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "reader"),
    [
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    ],
)
def test_promotions_are_readable_one_way(writer, reader):
    new = avro(record(f("v", reader)))
    old = avro(record(f("v", writer)))
    ok("BACKWARD", new, old)  # new reads old
    if (reader, writer) not in (("bytes", "string"), ("string", "bytes")):
        message = refused("FORWARD", new, old)
        assert f"field 'User.v': {reader} cannot be read as {writer}" in message


@pytest.mark.parametrize(
    ("writer", "reader"),
    [("long", "int"), ("double", "float"), ("string", "int"), ("boolean", "int"), ("int", "string")],
)
def test_other_primitive_changes_are_refused(writer, reader):
    message = refused("BACKWARD", avro(record(f("v", reader))), avro(record(f("v", writer))))
    assert "BACKWARD: the new schema cannot read data written with version 0" in message
    assert f"field 'User.v': {writer} cannot be read as {reader} (no such promotion)" in message


def test_adding_a_field_needs_a_default_for_backward():
    v0 = avro(record(f("a", "int")))
    with_default = avro(record(f("a", "int"), f("b", "string", default="x")))
    without = avro(record(f("a", "int"), f("b", "string")))
    ok("BACKWARD", with_default, v0)
    ok("FULL", with_default, v0)
    message = refused("BACKWARD", without, v0)
    assert "field 'User.b': the reader has it without a default and the writer's schema lacks it" in message
    ok("FORWARD", without, v0)  # the old reader skips the new field


def test_removing_a_field_breaks_forward_unless_it_had_a_default():
    v0 = avro(record(f("a", "int"), f("b", "string")))
    removed = avro(record(f("a", "int")))
    ok("BACKWARD", removed, v0)  # the new reader skips b
    message = refused("FORWARD", removed, v0)
    assert "FORWARD: version 0 cannot read data written with the new schema" in message
    assert "field 'User.b'" in message
    v0_default = avro(record(f("a", "int"), f("b", "string", default="")))
    ok("FULL", removed, v0_default)


def test_field_aliases_and_record_aliases():
    old = avro(record(f("name", "string")))
    renamed = avro(record(f("full_name", "string", aliases=["name"])))
    ok("BACKWARD", renamed, old)
    other_record = avro(record(f("name", "string"), name="Person"))
    assert "different names" in refused("BACKWARD", other_record, old)
    aliased = avro(record(f("name", "string"), name="Person", aliases=["User"]))
    ok("BACKWARD", aliased, old)


def test_record_names_compare_without_namespace():
    ok("FULL", avro(record(f("a", "int"), namespace="x.y")), avro(record(f("a", "int"), namespace="z")))


def test_nullable_unions():
    nullable = avro(record(f("v", ["null", "string"], default=None)))
    plain = avro(record(f("v", "string")))
    ok("BACKWARD", nullable, plain)  # a union reads any of its branches
    message = refused("BACKWARD", plain, nullable)
    assert "field 'User.v': null cannot be read as string" in message
    ok("BACKWARD", avro(record(f("v", ["null", "long"]))), avro(record(f("v", ["null", "int"]))))
    message = refused(
        "BACKWARD", avro(record(f("v", ["null", "int"]))), avro(record(f("v", ["null", "long"])))
    )
    assert "the writer's long matches no branch of the reader's union [null, int]" in message


def test_nested_records_report_the_full_path():
    def doc(zip_type):
        address = record(f("city", "string"), f("zip", zip_type), name="Address")
        return avro(record(f("name", "string"), f("address", address)))

    ok("FULL", doc("string"), doc("bytes"))
    message = refused("BACKWARD", doc("int"), doc("string"))
    assert "field 'User.address.zip': string cannot be read as int" in message


def test_arrays_and_maps():
    ok(
        "BACKWARD",
        avro(record(f("xs", {"type": "array", "items": "long"}))),
        avro(record(f("xs", {"type": "array", "items": "int"}))),
    )
    message = refused(
        "BACKWARD",
        avro(record(f("xs", {"type": "array", "items": "int"}))),
        avro(record(f("xs", {"type": "array", "items": "long"}))),
    )
    assert "field 'User.xs[]': long cannot be read as int" in message
    message = refused(
        "BACKWARD",
        avro(record(f("m", {"type": "map", "values": "int"}))),
        avro(record(f("m", {"type": "map", "values": "string"}))),
    )
    assert "field 'User.m{}': string cannot be read as int" in message
    message = refused(
        "BACKWARD",
        avro(record(f("m", {"type": "map", "values": "int"}))),
        avro(record(f("m", {"type": "array", "items": "int"}))),
    )
    assert "array<int> cannot be read as map<int>" in message


def test_enum_symbols():
    def doc(symbols, **extra):
        return avro(record(f("e", {"type": "enum", "name": "Color", "symbols": symbols, **extra})))

    ok("BACKWARD", doc(["RED", "GREEN", "BLUE"]), doc(["RED", "GREEN"]))  # the new reader knows more
    message = refused("FORWARD", doc(["RED", "GREEN", "BLUE"]), doc(["RED", "GREEN"]))
    assert "has symbols ['BLUE'] that the reader's enum lacks" in message
    ok(
        "FULL",
        doc(["RED", "GREEN", "BLUE", "UNKNOWN"], default="UNKNOWN"),
        doc(["RED", "GREEN", "UNKNOWN"], default="UNKNOWN"),
    )
    assert problems(
        {"type": "enum", "name": "A", "symbols": ["X"]}, {"type": "enum", "name": "B", "symbols": ["X"]}
    )


def test_fixed():
    def doc(size, name="Hash"):
        return avro(record(f("h", {"type": "fixed", "name": name, "size": size})))

    ok("FULL", doc(16), doc(16))
    assert "fixed size 20 cannot be read as fixed size 16" in refused("BACKWARD", doc(16), doc(20))
    assert "different names" in refused("BACKWARD", doc(16, "Other"), doc(16))
    assert "fixed Hash(16) cannot be read as bytes" in refused(
        "BACKWARD", avro(record(f("h", "bytes"))), doc(16)
    )


def test_recursive_records_resolve():
    def linked(value_type):
        return avro(record(f("value", value_type), f("next", ["null", "Node"], default=None), name="Node"))

    ok("BACKWARD", linked("long"), linked("int"))
    assert "field 'Node.value': long cannot be read as int" in refused(
        "BACKWARD", linked("int"), linked("long")
    )


def test_top_level_non_record_avro_schemas():
    ok("BACKWARD", avro("long"), avro("int"))
    assert "the top-level schema: long cannot be read as int" in refused(
        "BACKWARD", avro("int"), avro("long")
    )


def test_json_schemas_use_the_same_rules():
    v0 = avro(record(f("a", "int")), kind="JSON")
    ok("BACKWARD", avro(record(f("a", "int"), f("b", ["null", "string"], default=None)), kind="JSON"), v0)
    assert "int cannot be read as string" in refused(
        "BACKWARD", avro(record(f("a", "string")), kind="JSON"), v0
    )


# -- strategies ---------------------------------------------------------------------------------------------


def test_always_compatible_accepts_anything_valid():
    ok("ALWAYS_COMPATIBLE", avro(record(f("a", "string"))), avro(record(f("a", "int"))))
    ok("ALWAYS_COMPATIBLE", SchemaData("STRING"), avro(record(f("a", "int"))))


def test_always_incompatible_refuses_any_change_but_not_the_same_schema():
    v0 = avro(record(f("a", "int")))
    ok("ALWAYS_INCOMPATIBLE", v0, v0)
    message = refused("ALWAYS_INCOMPATIBLE", avro(record(f("a", "int"), f("b", "int", default=0))), v0)
    assert "ALWAYS_INCOMPATIBLE: the schema differs from version 0" in message
    changed_props = SchemaData(v0.type, v0.data, {"owner": "me"})
    refused("ALWAYS_INCOMPATIBLE", changed_props, v0)


def test_full_checks_both_directions():
    v0 = avro(record(f("a", "int")))
    assert "BACKWARD" not in refused("FULL", avro(record(f("a", "int"), f("b", "int"))), v0)
    assert "the new schema cannot read" in refused("FULL", avro(record(f("a", "int"), f("b", "int"))), v0)
    assert "version 0 cannot read" in refused("FULL", avro(record(f("b", "int", default=0))), v0)


def test_plain_strategies_check_the_latest_transitive_ones_all_versions():
    v0 = avro(record(f("a", "int")))
    v1 = avro(record(f("a", "int"), f("b", "string", default="x")))
    v2 = avro(record(f("a", "int"), f("b", "string")))  # reads v1, not v0
    ok("BACKWARD", v2, v0, v1)
    message = refused("BACKWARD_TRANSITIVE", v2, v0, v1)
    assert "version 0" in message and "field 'User.b'" in message

    w0 = avro(record(f("a", "int"), f("b", "string")))
    w1 = avro(record(f("a", "int"), f("b", "string", default="x")))
    w2 = avro(record(f("a", "int")))  # v1 reads it (default), v0 does not
    ok("FORWARD", w2, w0, w1)
    assert "version 0 cannot read" in refused("FORWARD_TRANSITIVE", w2, w0, w1)
    ok("FULL", w2, w0, w1)
    assert "version 0 cannot read" in refused("FULL_TRANSITIVE", w2, w0, w1)


def test_an_empty_history_accepts_any_valid_schema():
    for strategy in STRATEGIES:
        ok(strategy, avro(record(f("a", "int"))))


@pytest.mark.parametrize("strategy", ["BACKWARD", "FORWARD", "FULL", "BACKWARD_TRANSITIVE"])
def test_non_struct_types_are_compatible_only_with_the_same_type(strategy):
    ok(strategy, SchemaData("STRING"), SchemaData("STRING"))
    ok(strategy, SchemaData("INT32", b"", {"a": "b"}), SchemaData("INT32"))
    ok(strategy, SchemaData("PROTOBUF_NATIVE", b"new descriptor"), SchemaData("PROTOBUF_NATIVE", b"old"))
    message = refused(strategy, SchemaData("INT32"), SchemaData("STRING"))
    assert f"{strategy}: schema type INT32 differs from type STRING of version 0" in message
    assert "differs from type AVRO" in refused(
        strategy, avro(record(f("a", "int")), kind="JSON"), avro(record(f("a", "int")))
    )


def key_value(key: SchemaData, value: SchemaData) -> SchemaData:
    data = struct.pack(">i", len(key.data)) + key.data + struct.pack(">i", len(value.data)) + value.data
    return SchemaData("KEY_VALUE", data, {"key.schema.type": key.type, "value.schema.type": value.type})


def test_key_value_schemas_are_checked_part_by_part():
    v0 = key_value(SchemaData("STRING"), avro(record(f("a", "int"))))
    ok("BACKWARD", key_value(SchemaData("STRING"), avro(record(f("a", "long")))), v0)
    message = refused("BACKWARD", key_value(SchemaData("STRING"), avro(record(f("a", "string")))), v0)
    assert "value: field 'User.a': int cannot be read as string" in message
    message = refused("BACKWARD", key_value(SchemaData("INT64"), avro(record(f("a", "int")))), v0)
    assert "key: schema type INT64 differs from STRING" in message
    with pytest.raises(InvalidSchema, match="truncated"):
        validate(SchemaData("KEY_VALUE", b"\x00\x00\x00\x05ab"))


def test_consumer_rule_reads_the_latest_under_plain_strategies():
    v0 = avro(record(f("a", "int")))
    v1 = avro(record(f("a", "int"), f("b", "string", default="x")))
    consumer = avro(record(f("a", "int"), f("b", "string")))  # reads v1, not v0
    history = [(0, v0), (1, v1)]
    for strategy in ("BACKWARD", "FORWARD", "FULL", "FORWARD_TRANSITIVE"):
        check_consumer(strategy, consumer, history)
    with pytest.raises(IncompatibleSchema, match="version 0"):
        check_consumer("BACKWARD_TRANSITIVE", consumer, history)
    with pytest.raises(IncompatibleSchema, match="the new schema cannot read data written with version 1"):
        check_consumer("FORWARD", avro(record(f("a", "string"))), history)
    check_consumer("ALWAYS_INCOMPATIBLE", v1, history)
    with pytest.raises(IncompatibleSchema):
        check_consumer("ALWAYS_INCOMPATIBLE", v0, history)
    check_consumer("ALWAYS_COMPATIBLE", avro(record(f("z", "string"))), history)
