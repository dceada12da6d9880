"""One raw consumer connection: CONNECT, SUBSCRIBE (broadcast), FLOW, then MESSAGE -> ACK.

A connection carries one consumer by default (the issue counts broker memory per consumer
"connection included"), or several (``per_connection``). It reads through the decoder's
shared buffer (``asyncio.BufferedProtocol``), so an idle connection holds no read buffer.

Acknowledgement is **cumulative**: one ACK says "everything up to here", so the broker's
virtual cursor only moves its mark-delete position (no set of individual acks to keep) and
a consumer acking every K-th message (``ack_every``) still acknowledges everything. The
consumer is declared ``Exclusive`` with the broadcast property, which is what permits
cumulative acks (the broker refuses them on Shared).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.lean.histogram import LatencyHistogram
from bench.lean.stamp import EntryCache
from bench.lean.tally import Tally
from magnetar.protocol import FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import wrap

BROADCAST_PROPERTY = ("magnetar.subscription.type", "Broadcast")
MAX_FRAME = 6 * 1024 * 1024
PROTOCOL_VERSION = 20
_MESSAGE = wire.BaseCommand.MESSAGE
_PING = wire.BaseCommand.PING
_SUCCESS = wire.BaseCommand.SUCCESS
_CONNECTED = wire.BaseCommand.CONNECTED
_CUMULATIVE = wire.CommandAck.Cumulative
_PONG_FRAME = encode_frame(wrap(wire.CommandPong()))
#: Closing with a reset: tens of thousands of ports in TIME_WAIT would starve the next run.
_LINGER_OFF = struct.pack("ii", 1, 0)


@dataclass
class WorkerState:
    """What every connection of a worker shares: where to subscribe, and where to count."""

    topic: str
    subscription: str
    name_prefix: str
    first_global: int  # this worker's first consumer number over all workers
    tally: Tally
    permits: int
    ack_every: int
    on_complete: Callable[[], None]  # called when the last consumer of the worker completes
    shared_buffer: bytearray = field(default_factory=lambda: bytearray(256 * 1024))
    cache: EntryCache = field(default_factory=EntryCache)
    from_broker: LatencyHistogram = field(default_factory=LatencyHistogram)
    from_publish: LatencyHistogram = field(default_factory=LatencyHistogram)
    errors: list[str] = field(default_factory=list)
    target: int = -1  # consumers that must complete (those subscribed); -1: all of them
    closed_by_broker: int = 0


class LeanConnection(asyncio.BufferedProtocol):
    """``count`` consumers (worker indexes ``first`` .. ``first + count - 1``) on one connection."""

    def __init__(self, state: WorkerState, first: int, count: int) -> None:
        self.state = state
        self.first = first
        self.count = count
        self.decoder = FrameDecoder(MAX_FRAME, shared=state.shared_buffer)
        self.transport: asyncio.Transport | None = None
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.unsubscribed = count
        self.since_flow = [0] * count

    # -- asyncio -----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        connect = wire.CommandConnect(client_version="magnetar-bench-lean", protocol_version=PROTOCOL_VERSION)
        connect.feature_flags.supports_broker_entry_metadata = True
        transport.write(encode_frame(wrap(connect)))  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ready.done():
            self.ready.set_exception(ConnectionError(f"connection lost before subscribing: {exc!r}"))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.decoder.buffer_updated(nbytes)
        now_us = time.time_ns() // 1000
        acks: list[bytes] = []
        while (frame := self.decoder.next_frame()) is not None:
            command = frame.command
            kind = command.type
            if kind == _MESSAGE:
                self._on_message(command.message, frame.payload, now_us, acks)
            elif kind == _PING:
                acks.append(_PONG_FRAME)
            else:
                self._on_control(frame.type_name, command)
        if acks:
            self.transport.writelines(acks)  # type: ignore[union-attr]

    # -- deliveries --------------------------------------------------------------------------
    def _on_message(self, message: wire.CommandMessage, payload: memoryview, now_us: int, out: list) -> None:
        state = self.state
        msg_id = message.message_id
        ledger_id, entry_id = msg_id.ledger_id, msg_id.entry_id
        times = state.cache.get(ledger_id, entry_id, payload)
        if times.broker_ms:
            state.from_broker.record(now_us - times.broker_ms * 1000)
        state.from_publish.record(now_us - times.publish_ms * 1000)
        local = message.consumer_id
        index = self.first + local
        tally = state.tally
        completed = tally.record(index, times.seq)
        received = tally.received[index]
        if completed or received % state.ack_every == 0:
            ack = wire.CommandAck(consumer_id=local, ack_type=_CUMULATIVE)
            ack.message_id.add(ledger_id=ledger_id, entry_id=entry_id)
            out.append(encode_frame(wrap(ack)))
        self.since_flow[local] += 1
        if self.since_flow[local] * 2 >= state.permits:
            out.append(self._flow(local, self.since_flow[local]))
            self.since_flow[local] = 0
        if completed and tally.complete == (state.target if state.target >= 0 else len(tally.received)):
            state.on_complete()

    # -- setup and the rest ------------------------------------------------------------------
    def _on_control(self, name: str, command: wire.BaseCommand) -> None:
        if command.type == _CONNECTED:
            self._subscribe_all()
        elif command.type == _SUCCESS:
            local = command.success.request_id
            self.transport.write(self._flow(local, self.state.permits))  # type: ignore[union-attr]
            self.unsubscribed -= 1
            if self.unsubscribed == 0 and not self.ready.done():
                self.ready.set_result(None)
        elif name == "ERROR":
            text = f"{command.error.error}: {command.error.message}"
            self.state.errors.append(text)
            if not self.ready.done():
                self.ready.set_exception(RuntimeError(text))
        elif name == "CLOSE_CONSUMER":
            self.state.closed_by_broker += 1
        elif name not in ("PONG", "ACK_RESPONSE"):
            self.state.errors.append(f"unexpected {name}")

    def _subscribe_all(self) -> None:
        state = self.state
        frames = []
        for local in range(self.count):
            sub = wire.CommandSubscribe(
                topic=state.topic,
                subscription=state.subscription,
                sub_type=wire.CommandSubscribe.Exclusive,
                consumer_id=local,
                request_id=local,
                consumer_name=f"{state.name_prefix}-{state.first_global + self.first + local}",
            )
            sub.metadata.add(key=BROADCAST_PROPERTY[0], value=BROADCAST_PROPERTY[1])
            frames.append(encode_frame(wrap(sub)))
        self.transport.writelines(frames)  # type: ignore[union-attr]

    @staticmethod
    def _flow(local: int, permits: int) -> bytes:
        return encode_frame(wrap(wire.CommandFlow(consumer_id=local, message_permits=permits)))

    def close(self) -> None:
        if self.transport is not None:
            sock = self.transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_OFF)
            self.transport.close()
