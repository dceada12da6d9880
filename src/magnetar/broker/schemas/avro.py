"""Avro schema definitions, parsed into the types schema resolution compares (compatibility.py):
records, enums and fixed types by their full names (with aliases), arrays, maps and unions; a
definition that is not valid JSON or not a valid Avro schema raises :class:`InvalidSchema`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TypeVar

from magnetar.broker.schemas.errors import InvalidSchema

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


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
_N = TypeVar("_N", "Record", "Enum", "Fixed")


def parse_avro(data: bytes | str) -> AvroType:
    """Parse an Avro schema definition; :class:`InvalidSchema` says what is wrong with it."""
    try:
        doc = json.loads(data.decode("utf-8") if isinstance(data, bytes | bytearray) else data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSchema(f"schema data is not valid JSON: {exc}") from None
    return _Parser().parse(doc, "")


@lru_cache(maxsize=512)
def parse_cached(data: bytes) -> AvroType:
    """``parse_avro`` of stored schema bytes, the latest parsed kept (each check parses them)."""
    return parse_avro(data)


class _Parser:
    def __init__(self) -> None:
        self.names: dict[str, Record | Enum | Fixed] = {}

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
        return found

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
