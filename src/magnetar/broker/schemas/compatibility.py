"""Schema compatibility, as Pulsar's schema registry decides it: pure functions, no I/O.

A schema is a :class:`SchemaData` (Pulsar's type name, the schema bytes, properties). AVRO
and JSON schemas carry an Avro schema definition (Pulsar's JSON schema is described by an
Avro record too), so both are checked with the Avro schema-resolution rules: can a *reader*
schema read data written with a *writer* schema?

- records match by name (or a reader alias); fields match by name (or a reader field's
  alias); a reader field missing from the writer needs a default; writer fields the reader
  lacks are skipped;
- promotions: int -> long/float/double, long -> float/double, float -> double,
  string <-> bytes;
- a writer union is readable when every branch is; a reader union reads a writer type when
  one of its branches does (so ``["null", "string"]`` reads ``"string"``, not the reverse);
- enums: every writer symbol is a reader symbol, unless the reader enum has a default;
- fixed: same name and size; arrays by items; maps by values.

Strategies (``check``): BACKWARD — the new schema reads data written with the latest one;
FORWARD — the latest reads data written with the new one; FULL — both; the ``*_TRANSITIVE``
ones the same against every version (since the last delete); ALWAYS_COMPATIBLE accepts
anything; ALWAYS_INCOMPATIBLE refuses any change. Other schema types (STRING, NONE/bytes,
INT32, PROTOBUF, ...) are compatible only with the same type. KEY_VALUE schemas are checked
part by part (key schema, value schema). The Avro definitions are parsed by avro.py.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from magnetar.broker.schemas.avro import (
    Array,
    AvroType,
    Enum,
    Fixed,
    Map,
    Named,
    Primitive,
    Record,
    Union,
    parse_avro,
    parse_cached,
)
from magnetar.broker.schemas.errors import IncompatibleSchema, InvalidSchema, SchemaError

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "IncompatibleSchema",
    "InvalidSchema",
    "SchemaData",
    "SchemaError",
    "check",
    "check_consumer",
    "parse_avro",
    "read_problems",
    "split_key_value",
    "validate",
]

STRATEGIES = (
    "ALWAYS_COMPATIBLE",
    "ALWAYS_INCOMPATIBLE",
    "BACKWARD",
    "FORWARD",
    "FULL",
    "BACKWARD_TRANSITIVE",
    "FORWARD_TRANSITIVE",
    "FULL_TRANSITIVE",
)
DEFAULT_STRATEGY = "BACKWARD"

#: Schema types whose data is an Avro schema definition.
STRUCT_TYPES = frozenset({"AVRO", "JSON"})


@dataclass(frozen=True)
class SchemaData:
    """One schema as Pulsar describes it. ``type`` is Pulsar's SchemaType name ("AVRO", "STRING"...)."""

    type: str
    data: bytes = b""
    properties: Mapping[str, str] = field(default_factory=dict)

    def same_as(self, other: SchemaData) -> bool:
        return (
            self.type == other.type
            and self.data == other.data
            and dict(self.properties) == dict(other.properties)
        )


#: (writer, reader) pairs Avro resolves by promotion.
PROMOTIONS = frozenset(
    {
        ("int", "long"),
        ("int", "float"),
        ("int", "double"),
        ("long", "float"),
        ("long", "double"),
        ("float", "double"),
        ("string", "bytes"),
        ("bytes", "string"),
    }
)


# -- schema resolution ---------------------------------------------------------------------------------------


def read_problems(reader: AvroType, writer: AvroType) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    problems: list[str] = []
    root = reader.name if isinstance(reader, Named) else ""
    _resolve(reader, writer, root, problems, set())
    return problems


def _at(path: str) -> str:
    return f"field '{path}'" if path else "the top-level schema"


def _resolve(
    reader: AvroType, writer: AvroType, path: str, out: list[str], seen: set[tuple[int, int]]
) -> None:
    if isinstance(writer, Union):
        # Any branch may have been written: each one must be readable.
        for branch in writer.branches:
            _resolve(reader, branch, path, out, seen)
        return
    if isinstance(reader, Union):
        if not any(_readable(branch, writer, seen) for branch in reader.branches):
            out.append(
                f"{_at(path)}: the writer's {writer.describe()} matches no branch of the reader's "
                f"union {reader.describe()}"
            )
        return
    if isinstance(reader, Primitive) and isinstance(writer, Primitive):
        if reader.name != writer.name and (writer.name, reader.name) not in PROMOTIONS:
            out.append(f"{_at(path)}: {writer.name} cannot be read as {reader.name} (no such promotion)")
        return
    if type(reader) is not type(writer):
        out.append(f"{_at(path)}: {writer.describe()} cannot be read as {reader.describe()}")
        return
    if isinstance(reader, Named):
        assert isinstance(writer, Named)
        if reader.name != writer.name and writer.fullname not in reader.aliases:
            out.append(
                f"{_at(path)}: the writer's {writer.describe()} and the reader's {reader.describe()} "
                "have different names"
            )
            return
    if isinstance(reader, Record):
        assert isinstance(writer, Record)
        _resolve_record(reader, writer, path, out, seen)
    elif isinstance(reader, Enum):
        assert isinstance(writer, Enum)
        missing = [s for s in writer.symbols if s not in reader.symbols]
        if missing and reader.default is None:
            out.append(
                f"{_at(path)}: the writer's {writer.describe()} has symbols {missing} that the reader's "
                "enum lacks, and the reader's enum has no default"
            )
    elif isinstance(reader, Fixed):
        assert isinstance(writer, Fixed)
        if reader.size != writer.size:
            out.append(f"{_at(path)}: fixed size {writer.size} cannot be read as fixed size {reader.size}")
    elif isinstance(reader, Array):
        assert isinstance(writer, Array)
        _resolve(reader.items, writer.items, f"{path}[]", out, seen)
    elif isinstance(reader, Map):
        assert isinstance(writer, Map)
        _resolve(reader.values, writer.values, f"{path}{{}}", out, seen)


def _resolve_record(
    reader: Record, writer: Record, path: str, out: list[str], seen: set[tuple[int, int]]
) -> None:
    """Each of the reader's fields from the writer's of the same name (or an alias), or its default."""
    key = (id(reader), id(writer))
    if key in seen:  # a recursive record: this pair is being checked already
        return
    seen.add(key)
    by_name = {f.name: f for f in writer.fields}
    for rf in reader.fields:
        fpath = f"{path}.{rf.name}" if path else rf.name
        wf = by_name.get(rf.name) or next((by_name[a] for a in rf.aliases if a in by_name), None)
        if wf is None:
            if not rf.has_default:
                out.append(
                    f"field '{fpath}': the reader has it without a default and the writer's schema "
                    "lacks it (a field a reader adds needs a default)"
                )
            continue
        _resolve(rf.type, wf.type, fpath, out, seen)


def _readable(reader: AvroType, writer: AvroType, seen: set[tuple[int, int]]) -> bool:
    problems: list[str] = []
    _resolve(reader, writer, "", problems, set(seen))
    return not problems


# -- schemas of every type -----------------------------------------------------------------------------------


def validate(schema: SchemaData) -> None:
    """Refuse schema data the broker could not check later (unparsable AVRO/JSON/KEY_VALUE)."""
    if schema.type in STRUCT_TYPES:
        try:
            parse_cached(bytes(schema.data))
        except InvalidSchema as exc:
            raise InvalidSchema(f"invalid {schema.type} schema: {exc}") from None
    elif schema.type == "KEY_VALUE":
        key, value = split_key_value(schema)
        validate(key)
        validate(value)


def split_key_value(schema: SchemaData) -> tuple[SchemaData, SchemaData]:
    """The key and value schemas of a KEY_VALUE schema: ``[len][key data][len][value data]`` and
    their types in the properties ``key.schema.type`` / ``value.schema.type``."""
    data = bytes(schema.data)
    parts = []
    offset = 0
    for _ in range(2):
        if offset + 4 > len(data):
            raise InvalidSchema("KEY_VALUE schema data is truncated")
        (length,) = struct.unpack_from(">i", data, offset)
        offset += 4
        if length < 0:
            length = 0
        if offset + length > len(data):
            raise InvalidSchema("KEY_VALUE schema data is truncated")
        parts.append(data[offset : offset + length])
        offset += length
    props = schema.properties
    key_type = props.get("key.schema.type", "BYTES")
    value_type = props.get("value.schema.type", "BYTES")
    return SchemaData(key_type, parts[0]), SchemaData(value_type, parts[1])


def _pair_problems(new: SchemaData, old: SchemaData, reader_is_new: bool) -> list[str]:
    """Problems reading, with one schema, data written with the other (same type assumed checked)."""
    if new.type != old.type:
        return [f"schema type {new.type} differs from {old.type}"]
    if new.type in STRUCT_TYPES:
        if new.data == old.data:
            return []
        new_avro = parse_cached(bytes(new.data))
        old_avro = parse_cached(bytes(old.data))
        return read_problems(new_avro, old_avro) if reader_is_new else read_problems(old_avro, new_avro)
    if new.type == "KEY_VALUE":
        new_key, new_value = split_key_value(new)
        old_key, old_value = split_key_value(old)
        return [f"key: {p}" for p in _pair_problems(new_key, old_key, reader_is_new)] + [
            f"value: {p}" for p in _pair_problems(new_value, old_value, reader_is_new)
        ]
    return []  # same non-struct type: its data carries no structure to compare


#: Which side must read the other's data under each strategy (without _TRANSITIVE): True for
#: the new schema reading the old's data (BACKWARD), False for the old reading the new's (FORWARD).
_READERS = {"BACKWARD": (True,), "FORWARD": (False,), "FULL": (True, False)}


def check(strategy: str, new: SchemaData, existing: Sequence[tuple[int, SchemaData]]) -> None:
    """Raise :class:`IncompatibleSchema` unless ``new`` may follow ``existing`` (``(version, schema)``
    pairs, oldest first, since the last delete) under ``strategy``."""
    if strategy not in STRATEGIES:
        raise InvalidSchema(f"unknown schema compatibility strategy {strategy!r}")
    validate(new)
    if strategy == "ALWAYS_COMPATIBLE":
        return
    against = existing if strategy.endswith("_TRANSITIVE") else existing[-1:]
    for version, old in reversed(against):
        if new.same_as(old):
            continue
        if strategy == "ALWAYS_INCOMPATIBLE":
            raise IncompatibleSchema(
                f"ALWAYS_INCOMPATIBLE: the schema differs from version {version} and no change is allowed"
            )
        if new.type != old.type:
            raise IncompatibleSchema(
                f"{strategy}: schema type {new.type} differs from type {old.type} of version {version}"
            )
        for reader_is_new in _READERS.get(strategy.removesuffix("_TRANSITIVE"), ()):
            if problems := _pair_problems(new, old, reader_is_new=reader_is_new):
                if reader_is_new:
                    what = f"the new schema cannot read data written with version {version}"
                else:
                    what = f"version {version} cannot read data written with the new schema"
                raise IncompatibleSchema(f"{strategy}: {what}: " + "; ".join(problems))


def check_consumer(strategy: str, schema: SchemaData, existing: Sequence[tuple[int, SchemaData]]) -> None:
    """A consumer's schema against the topic's (Pulsar's rule): under BACKWARD, FORWARD, FULL and
    FORWARD_TRANSITIVE it must read data written with the latest version; under BACKWARD_TRANSITIVE
    and FULL_TRANSITIVE it is checked against every version; ALWAYS_INCOMPATIBLE wants the latest
    schema itself."""
    if strategy in ("BACKWARD", "FORWARD", "FULL", "FORWARD_TRANSITIVE"):
        check("BACKWARD", schema, existing[-1:])
    elif strategy == "ALWAYS_INCOMPATIBLE":
        check(strategy, schema, existing[-1:])
    else:
        check(strategy, schema, existing)
