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
part by part (key schema, value schema).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

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


class SchemaError(Exception):
    """Base of the errors below; the message is meant for the client."""


class InvalidSchema(SchemaError):
    """The schema data cannot be understood (not JSON, not an Avro schema...)."""


class IncompatibleSchema(SchemaError):
    """The schema breaks the compatibility strategy."""


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


# -- Avro schemas --------------------------------------------------------------------------------------------

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})

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


@dataclass(eq=False)
class Primitive:
    name: str

    def describe(self) -> str:
        return self.name


@dataclass(eq=False)
class Field:
    name: str
    type: AvroType
    has_default: bool
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class Named:
    fullname: str
    aliases: frozenset[str]

    @property
    def name(self) -> str:
        return self.fullname.rpartition(".")[2]


@dataclass(eq=False)
class Record(Named):
    fields: list[Field] = field(default_factory=list)

    def describe(self) -> str:
        return f"record {self.fullname}"


@dataclass(eq=False)
class Enum(Named):
    symbols: tuple[str, ...] = ()
    default: str | None = None

    def describe(self) -> str:
        return f"enum {self.fullname}"


@dataclass(eq=False)
class Fixed(Named):
    size: int = 0

    def describe(self) -> str:
        return f"fixed {self.fullname}({self.size})"


@dataclass(eq=False)
class Array:
    items: AvroType

    def describe(self) -> str:
        return f"array<{self.items.describe()}>"


@dataclass(eq=False)
class Map:
    values: AvroType

    def describe(self) -> str:
        return f"map<{self.values.describe()}>"


@dataclass(eq=False)
class Union:
    branches: list[AvroType]

    def describe(self) -> str:
        return "[" + ", ".join(b.describe() for b in self.branches) + "]"


AvroType = Primitive | Record | Enum | Fixed | Array | Map | Union
#: A named type being defined (``_Parser._define`` gives back what it is given).
_N = TypeVar("_N", bound=Named)


def parse_avro(data: bytes | str) -> AvroType:
    """Parse an Avro schema definition; :class:`InvalidSchema` says what is wrong with it."""
    try:
        doc = json.loads(data.decode("utf-8") if isinstance(data, bytes | bytearray) else data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSchema(f"schema data is not valid JSON: {exc}") from None
    return _Parser().parse(doc, "")


@lru_cache(maxsize=512)
def _parse_cached(data: bytes) -> AvroType:
    return parse_avro(data)


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, Named] = {}

    def parse(self, doc: object, namespace: str) -> AvroType:
        if isinstance(doc, str):
            return self._reference(doc, namespace)
        if isinstance(doc, list):
            branches = [self.parse(b, namespace) for b in doc]
            if any(isinstance(b, Union) for b in branches):
                raise InvalidSchema("a union cannot directly contain another union")
            return Union(branches)
        if not isinstance(doc, dict):
            raise InvalidSchema(f"not an Avro schema: {json.dumps(doc)[:80]}")
        kind = doc.get("type")
        if kind is None:
            raise InvalidSchema(f"schema object without a 'type': {json.dumps(doc)[:80]}")
        if isinstance(kind, list | dict):
            return self.parse(kind, namespace)
        if not isinstance(kind, str):
            raise InvalidSchema(f"'type' must be a string, got {kind!r}")
        if kind in PRIMITIVES:  # {"type": "long", "logicalType": "timestamp-millis"} is a long
            return Primitive(kind)
        if kind in ("record", "error"):
            return self._record(doc, namespace)
        if kind == "enum":
            return self._enum(doc, namespace)
        if kind == "fixed":
            size = doc.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise InvalidSchema(f"fixed {doc.get('name')!r} needs a non-negative integer 'size'")
            return self._define(Fixed(*self._name(doc, namespace), size=size))
        if kind == "array":
            if "items" not in doc:
                raise InvalidSchema("array without 'items'")
            return Array(self.parse(doc["items"], namespace))
        if kind == "map":
            if "values" not in doc:
                raise InvalidSchema("map without 'values'")
            return Map(self.parse(doc["values"], namespace))
        # {"type": "SomeNamedType"} refers to a named type.
        return self._reference(kind, namespace)

    def _reference(self, name: str, namespace: str) -> AvroType:
        if name in PRIMITIVES:
            return Primitive(name)
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        found = self.names.get(full) or self.names.get(name)
        if found is None:
            raise InvalidSchema(f"unknown type {name!r}")
        return found  # type: ignore[return-value]

    def _name(self, doc: dict, namespace: str) -> tuple[str, frozenset[str]]:
        name = doc.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidSchema(f"{doc.get('type')} without a 'name'")
        ns = doc.get("namespace")
        if ns is not None and not isinstance(ns, str):
            raise InvalidSchema(f"namespace of {name!r} must be a string")
        if "." in name:
            full = name
        else:
            ns = namespace if ns is None else ns
            full = f"{ns}.{name}" if ns else name
        space = full.rpartition(".")[0]
        return full, frozenset(_full(a, space) for a in _aliases(doc, name))

    def _define(self, named: _N) -> _N:
        if named.fullname in self.names:
            raise InvalidSchema(f"type {named.fullname!r} is defined twice")
        self.names[named.fullname] = named
        return named

    def _record(self, doc: dict, namespace: str) -> Record:
        record = Record(*self._name(doc, namespace))
        self._define(record)  # before the fields: a record may refer to itself
        fields = doc.get("fields")
        if not isinstance(fields, list):
            raise InvalidSchema(f"record {record.fullname!r} needs a 'fields' list")
        space = record.fullname.rpartition(".")[0]
        seen: set[str] = set()
        for f in fields:
            if not isinstance(f, dict) or not isinstance(f.get("name"), str):
                raise InvalidSchema(f"record {record.fullname!r} has a field without a name")
            if "type" not in f:
                raise InvalidSchema(f"field {record.fullname}.{f['name']} has no 'type'")
            if f["name"] in seen:
                raise InvalidSchema(f"record {record.fullname!r} has two fields named {f['name']!r}")
            seen.add(f["name"])
            ftype = self.parse(f["type"], space)
            record.fields.append(Field(f["name"], ftype, "default" in f, tuple(_aliases(f, f["name"]))))
        return record

    def _enum(self, doc: dict, namespace: str) -> Enum:
        full, aliases = self._name(doc, namespace)
        symbols = doc.get("symbols")
        if not isinstance(symbols, list) or not all(isinstance(s, str) for s in symbols):
            raise InvalidSchema(f"enum {full!r} needs a 'symbols' list of strings")
        if len(set(symbols)) != len(symbols):
            raise InvalidSchema(f"enum {full!r} has duplicate symbols")
        default = doc.get("default")
        if default is not None and default not in symbols:
            raise InvalidSchema(f"enum {full!r}: default {default!r} is not one of its symbols")
        enum = Enum(full, aliases, tuple(symbols), default)
        self._define(enum)
        return enum


def _aliases(doc: dict, owner: str) -> list[str]:
    aliases = doc.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InvalidSchema(f"aliases of {owner!r} must be a list of strings")
    return aliases


def _full(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


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
            _parse_cached(bytes(schema.data))
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
        new_avro = _parse_cached(bytes(new.data))
        old_avro = _parse_cached(bytes(old.data))
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
