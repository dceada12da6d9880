"""Answering a connection the broker accepted only to refuse it, with a reason the client can read.

The connection's first request is read whole before the answer is written and the connection
closed: closing a socket with unread bytes in it sends a reset, which can reach the client before
the answer and drop it. ``Answer`` says what a port answers and when its request is in; the
Pulsar port's is here, the HTTP port's in ``magnetar.admin.http_refusal``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from magnetar.broker import descriptors
from magnetar.protocol import encode_frame, wire
from magnetar.protocol.commands import wrap

#: How long a refused connection has to send its request (after its TLS handshake, which has as
#: long): it holds the broker's last descriptor meanwhile. It is answered all the same then.
ANSWER_WAIT_S = 3.0
#: Bytes read of a request at most before answering it.
MAX_REQUEST = 64 * 1024


@dataclass(frozen=True)
class Answer:
    """What a port answers a connection it refuses: ``reply``, once ``complete(bytes read)``."""

    reply: bytes
    complete: Callable[[bytes], bool]


def _frame_complete(data: bytes) -> bool:
    """A whole Pulsar frame (4-byte total size first) is in: the client's CONNECT."""
    return len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big")


#: The binary protocol's answer when no descriptor is left: what a CONNECT gets near the limit
#: (connection.py); an ERROR before the CONNECT would be dropped by clients.
PULSAR_OUT_OF_DESCRIPTORS = Answer(
    encode_frame(
        wrap(
            wire.CommandError(
                request_id=0, error=wire.ServiceNotReady, message=descriptors.NO_NEW_CONNECTIONS
            )
        )
    ),
    _frame_complete,
)


class Refusal(asyncio.Protocol):
    """Reads the request until ``answer.complete`` (or ``ANSWER_WAIT_S``, or the client's end), writes
    ``answer.reply`` and closes; ``closed`` is called once the connection's socket is closed."""

    def __init__(self, answer: Answer, closed: Callable[[], None]) -> None:
        self._answer = answer
        self._closed = closed
        self._received = b""
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # a stream's transport
        self._timer = asyncio.get_running_loop().call_later(ANSWER_WAIT_S, self._reply)

    def data_received(self, data: bytes) -> None:
        self._received += data
        if len(self._received) >= MAX_REQUEST or self._answer.complete(self._received):
            self._reply()

    def eof_received(self) -> bool:
        self._reply()
        return False

    def _reply(self) -> None:
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(self._answer.reply)
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        # asyncio closes the socket after this call returns: the descriptor is free on the next pass.
        asyncio.get_running_loop().call_soon(self._closed)
