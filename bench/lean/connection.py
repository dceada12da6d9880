"""One raw consumer connection: CONNECT, SUBSCRIBE (broadcast or exclusive), FLOW, then MESSAGE -> ACK.

A connection carries one consumer by default (the issue counts broker memory per consumer
"connection included"), or several (``per_connection``). It reads through the decoder's
shared buffer (``asyncio.BufferedProtocol``), so an idle connection holds no read buffer.

Acknowledgement is **cumulative**: one ACK says "everything up to here", so the broker's
virtual cursor only moves its mark-delete position (no set of individual acks to keep) and
a consumer acking every K-th message (``ack_every``) still acknowledges everything. The
consumer is declared ``Exclusive`` with the broadcast property, which is what permits
cumulative acks (the broker refuses them on Shared). In ``exclusive`` mode each consumer has an
Exclusive subscription of its own instead (no property): the seed's Figure 8 comparison.

A *stalled* connection (``--stalled``) takes its first message, then stops reading its socket
and sends no more FLOW, so the broker's writes to it back up; it counts in a tally of its own
and records no latency. With ``chunks`` set, a MESSAGE is a chunk, and a message counts once
its chunks came whole (``chunks.py``).
"""

from __future__ import annotations

import asyncio
import fcntl
import socket
import struct
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bench.lean.chunks import ChunkCache, ChunkCheck
from bench.lean.histogram import LatencyHistogram
from bench.lean.stamp import EntryCache
from bench.lean.tally import Tally
from magnetar.protocol import Frame, FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.hot_acks import HotMessage
from magnetar.protocol.hot_frames import ack_frame

BROADCAST_PROPERTY = ("magnetar.subscription.type", "Broadcast")
MAX_FRAME = 6 * 1024 * 1024
PROTOCOL_VERSION = 20
_MESSAGE = wire.BaseCommand.MESSAGE
_PING = wire.BaseCommand.PING
_SUCCESS = wire.BaseCommand.SUCCESS
_CONNECTED = wire.BaseCommand.CONNECTED
_LOOKUP_RESPONSE = wire.BaseCommand.LOOKUP_RESPONSE
_REDIRECT = wire.CommandLookupTopicResponse.Redirect
_CONNECT = wire.CommandLookupTopicResponse.Connect
#: The LOOKUPs' request id: apart from the SUBSCRIBEs', which are the consumers' local numbers.
LOOKUP_REQUEST_ID = 1 << 40
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
    exclusive: bool = False  # one Exclusive subscription per consumer, no broadcast property
    stalled_tally: Tally | None = None  # the stalled consumers' counts (indexed apart)
    chunks: ChunkCheck | None = None  # chunked messages: checked whole before they count
    chunk_cache: ChunkCache = field(default_factory=ChunkCache)
    #: Look the topic up first, as a client does, expecting to be sent to this URL (the one dialled:
    #: a spread topic's LOOKUP names the shared port); None: subscribe at once.
    lookup: str | None = None

    def subscription_of(self, number: int) -> str:
        """The subscription of consumer ``number`` (over all workers)."""
        return f"{self.subscription}-{number}" if self.exclusive else self.subscription


class LeanConnection(asyncio.BufferedProtocol):
    """``count`` consumers (worker indexes ``first`` .. ``first + count - 1``) on one connection."""

    def __init__(
        self, state: WorkerState, first: int, count: int, base: int = -1, stalled: bool = False
    ) -> None:
        self.state = state
        self.first = first
        self.count = count
        self.stalled = stalled
        self.tally = state.stalled_tally if stalled else state.tally
        self.base = first if base < 0 else base  # the first consumer's index in ``self.tally``
        self.failed = 0  # consumers the broker refused
        self.stopped = False
        # The usual MESSAGE comes as a ``HotMessage``, read without protobuf (protocol.hot_acks):
        # the generator's own cost per delivery is part of what shares the machine with the broker.
        self.decoder = FrameDecoder(MAX_FRAME, shared=state.shared_buffer, hot_messages=True)
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
        while not self.stopped and (frame := self.decoder.next_frame()) is not None:
            if frame.__class__ is HotMessage and not self.stalled and self.state.chunks is None:
                self._on_hot_message(frame, now_us, acks)  # type: ignore[arg-type]
                continue
            if frame.__class__ is HotMessage:  # a stalled or chunk-checking consumer: the full way
                frame = Frame(_as_command(frame), frame.payload)  # type: ignore[union-attr]
            command = frame.command
            kind = command.type
            if kind == _MESSAGE:
                if self.stalled:
                    self._stall(command.message, frame.payload, acks)
                elif self.state.chunks is not None:
                    self._on_chunk(command.message, frame.payload, now_us, acks)
                else:
                    self._on_message(command.message, frame.payload, now_us, acks)
            elif kind == _PING:
                acks.append(_PONG_FRAME)
            else:
                self._on_control(frame.type_name, command)
        if acks:
            self.transport.writelines(acks)  # type: ignore[union-attr]

    # -- deliveries --------------------------------------------------------------------------
    def _on_message(self, message: wire.CommandMessage, payload: memoryview, now_us: int, out: list) -> None:
        msg_id = message.message_id
        self._deliver(message.consumer_id, msg_id.ledger_id, msg_id.entry_id, payload, now_us, out)

    def _on_hot_message(self, message: HotMessage, now_us: int, out: list) -> None:
        """``_on_message`` for a MESSAGE read without protobuf."""
        self._deliver(message.consumer_id, message.ledger_id, message.entry_id, message.payload, now_us, out)

    def _deliver(
        self, local: int, ledger_id: int, entry_id: int, payload: memoryview, now_us: int, out: list
    ) -> None:
        state = self.state
        times = state.cache.get(ledger_id, entry_id, payload)
        if times.broker_ms:
            state.from_broker.record(now_us - times.broker_ms * 1000)
        state.from_publish.record(now_us - times.publish_ms * 1000)
        completed = self.tally.record(self.base + local, times.seq)  # type: ignore[union-attr]
        self._after(local, ledger_id, entry_id, completed, True, out)

    def _on_chunk(self, message: wire.CommandMessage, payload: memoryview, now_us: int, out: list) -> None:
        state = self.state
        msg_id = message.message_id
        ledger_id, entry_id = msg_id.ledger_id, msg_id.entry_id
        chunk = state.chunk_cache.get(ledger_id, entry_id, payload)
        local = message.consumer_id
        whole = state.chunks.take(self.base + local, chunk)  # type: ignore[union-attr]
        completed = False
        if whole:
            if chunk.broker_ms:
                state.from_broker.record(now_us - chunk.broker_ms * 1000)
            state.from_publish.record(now_us - chunk.publish_ms * 1000)
            completed = self.tally.record(self.base + local, chunk.seq)  # type: ignore[union-attr]
        self._after(local, ledger_id, entry_id, completed, whole, out)

    def _after(
        self, local: int, ledger_id: int, entry_id: int, completed: bool, counted: bool, out: list
    ) -> None:
        """The ACK (cumulative, every ``ack_every`` counted messages) and the FLOW refill."""
        state = self.state
        tally = self.tally
        if counted and (completed or tally.received[self.base + local] % state.ack_every == 0):  # type: ignore[union-attr]
            out.append(ack_frame(local, True, ledger_id, entry_id))
        self.since_flow[local] += 1
        if self.since_flow[local] * 2 >= state.permits:
            out.append(self._flow(local, self.since_flow[local]))
            self.since_flow[local] = 0
        if completed and tally.complete == (state.target if state.target >= 0 else len(tally.received)):  # type: ignore[union-attr]
            state.on_complete()

    def _stall(self, message: wire.CommandMessage, payload: memoryview, out: list) -> None:
        """Take the first message (ACK it), then read and FLOW no more: the broker's writes back up."""
        state = self.state
        msg_id = message.message_id
        if state.chunks is not None:
            seq = state.chunk_cache.get(msg_id.ledger_id, msg_id.entry_id, payload).seq
        else:
            seq = state.cache.get(msg_id.ledger_id, msg_id.entry_id, payload).seq
        self.tally.record(self.base + message.consumer_id, seq)  # type: ignore[union-attr]
        out.append(ack_frame(message.consumer_id, True, msg_id.ledger_id, msg_id.entry_id))
        self.stopped = True
        self.transport.pause_reading()  # type: ignore[union-attr]

    def unread_bytes(self) -> int:
        """Bytes the broker sent that sit unread in this socket's receive queue (a stalled one's backlog)."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return 0
        try:
            return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            return 0

    # -- setup and the rest ------------------------------------------------------------------
    def _on_control(self, name: str, command: wire.BaseCommand) -> None:
        if command.type == _CONNECTED:
            if self.state.lookup is None:
                self._subscribe_all()
            else:
                self._lookup(authoritative=False)
        elif command.type == _LOOKUP_RESPONSE:
            self._looked_up(command.lookup_response)
        elif command.type == _SUCCESS:
            local = command.success.request_id
            self.transport.write(self._flow(local, self.state.permits))  # type: ignore[union-attr]
            self.unsubscribed -= 1
            if self.unsubscribed == 0 and not self.ready.done():
                self.ready.set_result(None)
        elif name == "ERROR":
            text = f"{wire.ServerError.Name(command.error.error)}: {command.error.message}"
            if len(self.state.errors) < 20:
                self.state.errors.append(text)
            if self.unsubscribed > 0 and command.error.request_id < self.count:
                self.failed += 1  # refused (e.g. ConsumerBusy): counted, the others go on
                self.unsubscribed -= 1
                if self.unsubscribed == 0 and not self.ready.done():
                    self.ready.set_result(None)
        elif name == "CLOSE_CONSUMER":
            self.state.closed_by_broker += 1
        elif name not in ("PONG", "ACK_RESPONSE"):
            self.state.errors.append(f"unexpected {name}")

    def _lookup(self, authoritative: bool) -> None:
        lookup = wire.CommandLookupTopic(
            topic=self.state.topic, request_id=LOOKUP_REQUEST_ID, authoritative=authoritative
        )
        self.transport.write(encode_frame(wrap(lookup)))  # type: ignore[union-attr]

    def _looked_up(self, answer: wire.CommandLookupTopicResponse) -> None:
        """A Redirect to the URL dialled is asked again there (this connection), as the official
        client does; Connect to it, the consumers subscribe here; anything else fails them."""
        url = answer.broker_service_url
        if answer.response == _REDIRECT and url == self.state.lookup:
            self._lookup(authoritative=True)
        elif answer.response == _CONNECT and url == self.state.lookup:
            self._subscribe_all()
        else:
            what = wire.CommandLookupTopicResponse.LookupType.Name(answer.response)
            self._fail_all(f"LOOKUP answered {what} {url!r}, not this broker")

    def _fail_all(self, reason: str) -> None:
        if len(self.state.errors) < 20:
            self.state.errors.append(reason)
        self.failed += self.unsubscribed
        self.unsubscribed = 0
        if not self.ready.done():
            self.ready.set_result(None)

    def _subscribe_all(self) -> None:
        state = self.state
        frames = []
        for local in range(self.count):
            number = state.first_global + self.first + local
            sub = wire.CommandSubscribe(
                topic=state.topic,
                subscription=state.subscription_of(number),
                sub_type=wire.CommandSubscribe.Exclusive,
                consumer_id=local,
                request_id=local,
                consumer_name=f"{state.name_prefix}-{number}",
            )
            if not state.exclusive:
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


def _as_command(message: HotMessage) -> wire.BaseCommand:
    """The BaseCommand a ``HotMessage`` was read from."""
    msg_id = wire.MessageIdData(ledger_id=message.ledger_id, entry_id=message.entry_id)
    if message.partition >= 0:
        msg_id.partition = message.partition
    return wrap(wire.CommandMessage(consumer_id=message.consumer_id, message_id=msg_id))
