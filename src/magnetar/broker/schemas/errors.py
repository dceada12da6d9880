"""What the schema checks raise; the message is meant for the client."""

from __future__ import annotations


class SchemaError(Exception):
    """Base of the errors below; the message is meant for the client."""


class InvalidSchema(SchemaError):
    """The schema data cannot be understood (not JSON, not an Avro schema...)."""


class IncompatibleSchema(SchemaError):
    """The schema breaks the compatibility strategy."""
