"""Errors raised by the protocol layer, and the one way it reads protobuf messages into them."""

from __future__ import annotations

from typing import TypeVar

from google.protobuf.message import DecodeError, Message

M = TypeVar("M", bound=Message)


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid Pulsar frame or command.

    The connection cannot continue after this: the byte stream has lost its framing
    or the peer broke the protocol's rules.
    """


class ChecksumMismatch(ProtocolError):
    """A message's CRC32C did not match its metadata and payload.

    Unlike other protocol errors this one is local to one message: the framing is
    intact, so the connection can carry on after rejecting the message.
    """


def parse_proto(message: M, data: bytes | memoryview, what: str) -> M:
    """``message`` read from ``data``; ProtocolError naming ``what`` when the bytes do not parse
    or leave required fields unset."""
    try:
        message.ParseFromString(data)  # type: ignore[arg-type]  # upb parses any buffer (stub: bytes)
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ProtocolError(f"malformed {what}: {exc}") from None
    if not message.IsInitialized():
        # upb's messages have FindInitializationErrors; the stub leaves it out.
        missing = ", ".join(message.FindInitializationErrors())  # type: ignore[attr-defined]
        raise ProtocolError(f"{what} is missing required fields: {missing}")
    return message
