"""Text fields that are not text: bytes that are not valid UTF-8 in a protobuf ``string`` field.

Protobuf (upb, proto2) parses such a field without complaint and hands its raw bytes back as
``bytes`` where every reader expects ``str``: a topic or producer name then fails deep inside a
handler, and a subscription name is stored as bytes that nothing can read back. The protocol
layer finds them here, so that the broker can refuse the one request that carries them.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from magnetar.protocol import pulsar_wire_pb2 as wire

_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def undecodable_field(message: Message) -> str | None:
    """The dotted name of the first string field of ``message`` (or of a message in it) whose bytes
    are not valid UTF-8; None when every string field is text. Visits set fields only."""
    for field, value in message.ListFields():
        if field.type == _STRING:
            values = value if field.is_repeated else (value,)
            if any(isinstance(v, bytes) for v in values):
                return field.name
        elif field.type == _MESSAGE:
            for sub in value if field.is_repeated else (value,):
                if (inner := undecodable_field(sub)) is not None:
                    return f"{field.name}.{inner}"
    return None


def undecodable_metadata(metadata: wire.MessageMetadata) -> str | None:
    """Like ``undecodable_field`` for a SEND's MessageMetadata, on the broker's hot path: only the
    string fields the broker reads or shows (producer name, key, chunk uuid, properties)."""
    for name in ("producer_name", "partition_key", "uuid", "replicated_from"):
        if isinstance(getattr(metadata, name), bytes):
            return name
    if metadata.properties:
        for kv in metadata.properties:
            key: object = kv.key  # object: the stub says str, upb may hand bytes
            value: object = kv.value
            if isinstance(key, bytes) or isinstance(value, bytes):
                return "properties"
    return None
