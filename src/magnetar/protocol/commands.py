"""Building commands: wrap a body message in its BaseCommand envelope.

``wrap(wire.CommandSuccess(request_id=7))`` finds the envelope's type and field from
the body's message type, so call sites never repeat the type/field pairing.
"""

from __future__ import annotations

from google.protobuf.message import Message

from magnetar.protocol import pulsar_wire_pb2 as wire

_ENVELOPE: dict[str, tuple[wire.BaseCommand.Type.ValueType, str]] = {}
for _field in wire.BaseCommand.DESCRIPTOR.fields:
    if _field.message_type is not None:
        _ENVELOPE[_field.message_type.full_name] = (
            wire.BaseCommand.Type.Value(_field.name.upper()),
            _field.name,
        )


def wrap(body: Message) -> wire.BaseCommand:
    """The BaseCommand carrying ``body`` with its type set."""
    cmd_type, field = _ENVELOPE[body.DESCRIPTOR.full_name]
    cmd = wire.BaseCommand(type=cmd_type)
    getattr(cmd, field).CopyFrom(body)
    return cmd


def ping() -> wire.BaseCommand:
    return wrap(wire.CommandPing())


def pong() -> wire.BaseCommand:
    return wrap(wire.CommandPong())


def success(request_id: int) -> wire.BaseCommand:
    return wrap(wire.CommandSuccess(request_id=request_id))


def error(request_id: int, code: wire.ServerError.ValueType, message: str) -> wire.BaseCommand:
    return wrap(wire.CommandError(request_id=request_id, error=code, message=message))


def message_id(
    ledger_id: int, entry_id: int, partition: int = -1, batch_index: int = -1
) -> wire.MessageIdData:
    msg_id = wire.MessageIdData(ledger_id=ledger_id, entry_id=entry_id)
    if partition != -1:
        msg_id.partition = partition
    if batch_index != -1:
        msg_id.batch_index = batch_index
    return msg_id
