"""One client connection (Pulsar's ``ServerCnx``): frames in, handlers, frames out.

The connection is an ``asyncio.BufferedProtocol`` (no stream objects, no task per
connection) so that an idle connection costs little: the socket is read straight into
the frame decoder, through a read buffer the broker's connections share, and a large
frame into a buffer of its own. Here are the socket's side (reads, flow control, large
frames, the output gathered per pass, keepalive) and the connection's state; every command
type maps to one handler function in ``broker/handlers/`` through ``HANDLERS``; a command
with no handler is a protocol error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from typing import TYPE_CHECKING, cast

from magnetar.broker import descriptors, loop_pass
from magnetar.broker.auth_session import AuthSession
from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import BrokerError
from magnetar.broker.flow_control import Hold, PendingSends, ReadHolds
from magnetar.broker.handlers import HANDLERS, handshake, producers, worker_access
from magnetar.broker.producer import Producer
from magnetar.broker.request_errors import TEXT_CHECKED, error_reply
from magnetar.protocol import Frame, FrameDecoder, ProtocolError, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import FrameTooLarge, encode_frame, parse_command
from magnetar.protocol.hot_acks import HotAck
from magnetar.protocol.text import undecodable_field

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

T = wire.BaseCommand.Type
#: The largest frame a connection may send before its CONNECT (a CONNECT is a few hundred bytes;
#: this leaves room for auth data): nobody unknown makes the broker buffer megabytes.
MAX_FRAME_BEFORE_CONNECT = 32 * 1024


#: A connection's ``gone_consumers`` and ``gone_producers`` until it has one (most never do).
_NONE_GONE: frozenset[int] = frozenset()
#: The PING a keepalive sends, encoded once.
_PING = encode_frame(wrap(wire.CommandPing()))


class ServerCnx(asyncio.BufferedProtocol):
    """Slotted, and with no timer of its own (``keepalive.py``): one broker holds 100K of them."""

    __slots__ = (
        "_counted_ip",
        "_flush_scheduled",
        "_keepalive_slot",
        "_out",
        "_passes",
        "_refusal",
        "_since",
        "_waiting_for_pong",
        "auth",
        "client_version",
        "close_request_ids",
        "closed",
        "config",
        "connected",
        "consumers",
        "decoder",
        "gone_consumers",
        "gone_producers",
        "holds",
        "looked_up_spread",
        "owner_pinned",
        "pending_sends",
        "producers",
        "protocol_version",
        "remote",
        "rerun",
        "service",
        "transport",
        "wants_entry_metadata",
        "writable",
    )

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.config = service.config
        self.decoder = FrameDecoder(
            MAX_FRAME_BEFORE_CONNECT, service.read_buffer, admission=self, hot_acks=True
        )
        self.transport: asyncio.Transport | None = None
        self.remote = "?"
        self.connected = False
        self.closed = False
        self.writable = True
        #: Why the connection is not read right now (flow control, see flow_control.py).
        self.holds = ReadHolds(self._pause_reading, self._resume_reading, service.hold_times)
        self.pending_sends = PendingSends(self.config.max_pending_publish_requests_per_connection)
        self._out: list[bytes | memoryview] = []
        self._flush_scheduled = False
        self._passes: loop_pass.PassScheduler | None = None
        self.protocol_version = 0
        self.client_version = ""
        self.wants_entry_metadata = False
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        #: Consumers this connection had (closed by either side): late FLOW/ACK for them is ignored
        #: (``forget_consumer``; a shared empty set until there is one).
        self.gone_consumers: frozenset[int] | set[int] = _NONE_GONE
        #: Producers the broker closed: SENDs the client had on the way are dropped, not an error
        #: (``forget_producer``).
        self.gone_producers: frozenset[int] | set[int] = _NONE_GONE
        #: Spread topics whose LOOKUPs here name their owner (handlers.access.pin_to_owner).
        self.owner_pinned: set[str] | None = None
        #: Spread topics a LOOKUP here named the shared port for (handlers.access.pin_to_owner).
        self.looked_up_spread: set[str] | None = None
        self._waiting_for_pong = False
        #: Where it is on the keepalive wheel (None: not on it), and since when it is connected.
        self._keepalive_slot: int | None = None
        self._since = 0.0
        self.close_request_ids: itertools.count | None = None
        #: The frame handled again once its topic was opened off the loop (``handlers.access.opened_first``).
        self.rerun: Frame | None = None
        #: Why this connection is refused (answered at its CONNECT), None when it is served.
        self._refusal: str | None = None
        #: The client IP this connection is counted under (broker_max_connections...), if counted.
        self._counted_ip: str | None = None
        #: The credentials' state: TLS identity, proved role, refresh (auth_session.py).
        self.auth = AuthSession()

    @property
    def role(self) -> str | None:
        """The role its credentials proved; None while authentication is off."""
        return self.auth.role

    @property
    def worker(self) -> str | None:
        """The worker it is, when it CONNECTed with a worker's own identity (worker_access.py)."""
        return self.auth.worker

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server's transport: asyncio's and uvloop's read and write.
        self.transport = stream = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self._over_connection_limit(stream, peer[0] if peer else "?"):
            return
        if transport.get_extra_info("sslcontext") is not None:
            self.auth.over_tls(transport.get_extra_info("peercert") or None)
        self.service.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and descriptors.in_reserve(sock.fileno(), descriptors.CONNECTION_RESERVE):
            # Too few descriptors are left to serve one more connection: its CONNECT is answered
            # with an error (an ERROR before CONNECT is dropped by clients), then it is closed.
            descriptors.EXHAUSTION.refused("connection", self.remote)
            self._refusal = descriptors.NO_NEW_CONNECTIONS
            # A peer that sends no CONNECT does not keep the descriptor.
            asyncio.get_running_loop().call_later(self.config.keepalive_interval_seconds or 30, self.close)
            return
        if self.service.publish_buffer.full:
            self.holds.hold(Hold.BROKER)
        wheel = self.service.keepalive
        if wheel.enabled:
            self._since = asyncio.get_running_loop().time()
            self._keepalive_slot = wheel.add(self)

    def _over_connection_limit(self, transport: asyncio.Transport, ip: str) -> bool:
        """Past broker_max_connections(_per_ip): refused as Pulsar does, before anything is set up
        for it (an ERROR NotAllowedError at once, then closed); nothing else is affected."""
        refused = self.service.limits.admit_connection(ip)
        if refused is None:
            if self.service.limits.connections.enabled:
                self._counted_ip = ip
            return False
        code = wire.ServerError.ValueType(refused.code)
        error = wire.CommandError(request_id=0, error=code, message=str(refused))
        transport.write(encode_frame(wrap(error)))
        transport.close()
        return True

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self.decoder.buffer_updated(nbytes)
        except ProtocolError as exc:
            self.protocol_error(exc)
            return
        if self._refusal is not None:
            self._refuse_connection(self._refusal)
            return
        self._handle_frames()

    def _refuse_connection(self, message: str) -> None:
        """Answer the first frame (the CONNECT) with an error, and close."""
        try:
            if self.decoder.next_frame() is None:
                return  # the rest of the CONNECT is on its way
        except ProtocolError:
            pass
        self._close_with_error(wire.ServiceNotReady, message)

    def _handle_frames(self) -> None:
        """Handle the complete frames read, in order, until a hold stops us (they wait then)."""
        try:
            while not self.closed:
                if self.holds.held:
                    self.decoder.keep_pending()
                    return
                frame = self.decoder.next_frame()
                if frame is None:
                    return
                if frame.__class__ is HotAck:
                    self._handle_hot_ack(frame)
                else:
                    self._handle(frame)  # type: ignore[arg-type]  # no HotMessage: not asked for
        except ProtocolError as exc:
            self.protocol_error(exc)

    def protocol_error(self, exc: ProtocolError) -> None:
        before = "" if self.connected else " (before CONNECT)"
        log.warning("%s: protocol error%s, closing: %s", self.remote, before, exc)
        if isinstance(exc, FrameTooLarge):
            self.service.frame_closes["too_large" if self.connected else "too_large_before_connect"] += 1
        self._close_with_error(wire.UnknownError, str(exc))

    def _close_with_error(self, code: wire.ServerError.ValueType, message: str) -> None:
        """An ERROR for the whole connection (request id 0), then closed."""
        self.send_command(wrap(wire.CommandError(request_id=0, error=code, message=message)))
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._keepalive_slot is not None:
            self.service.keepalive.remove(self, self._keepalive_slot)
            self._keepalive_slot = None
        self.service.connections.discard(self)
        if self._counted_ip is not None:
            self.service.limits.connections.release(self._counted_ip)
            self._counted_ip = None
        self.service.frame_room_released(self)
        for producer in self.producers.values():
            producer.closed = True
            producer.topic.remove_producer(producer)
        for consumer in self.consumers.values():
            consumer.subscription.remove_consumer(consumer)
        self.producers.clear()
        self.consumers.clear()

    # -- large frames (frame_budget.py) -------------------------------------------------------
    # A large frame's own buffer is made only within the broker's budget for frames being
    # received; until there is room the connection is not read (Hold.FRAMES).
    def admit_large_frame(self, size: int) -> bool:
        if not self.connected:  # the decoder's limit before CONNECT is below LARGE_FRAME
            raise ProtocolError(f"frame of {size} bytes before CONNECT")
        if self.service.frame_budget.reserve(self, size, time.monotonic()):
            return True
        self.holds.hold(Hold.FRAMES)
        self.service.frame_budget_full(self, size)
        return False

    def release_large_frame(self, size: int) -> None:
        self.service.frame_room_released(self)

    def frame_room_granted(self) -> None:
        self.holds.release(Hold.FRAMES)

    def close_for_stalled_frame(self, size: int, seconds: float) -> None:
        """Our large frame has held its room for ``seconds`` while others wait: give it up."""
        message = (
            f"a frame of {size} bytes stayed incomplete for {seconds:.1f} s while other connections "
            "waited for memory to receive theirs (max_incomplete_frame_bytes)"
        )
        log.warning("%s: closing: %s", self.remote, message)
        self.service.frame_closes["stalled"] += 1
        self._close_with_error(wire.ServiceNotReady, message)

    # -- flow control (flow_control.py) ------------------------------------------------------
    # A peer that does not read what we write (receipts, messages) is not read either: its
    # sends would otherwise be stored and their receipts pile up in memory without bound.
    # TCP then holds the peer back, and every other connection is served as before.
    def pause_writing(self) -> None:
        self.writable = False
        self.holds.hold(Hold.WRITES)

    def resume_writing(self) -> None:
        self.writable = True
        self.holds.release(Hold.WRITES)
        for consumer in self.consumers.values():
            consumer.subscription.on_writable(consumer)

    def _open_transport(self) -> asyncio.Transport | None:
        """The transport while it is still open (not closing), else None."""
        transport = self.transport
        return transport if transport is not None and not transport.is_closing() else None

    def _pause_reading(self) -> None:
        if (transport := self._open_transport()) is not None:
            transport.pause_reading()

    def _resume_reading(self) -> None:
        if (transport := self._open_transport()) is None:
            return
        if self.decoder.buffered:
            # Frames read before the hold come first (outside this call, which a receipt or a
            # drained write buffer makes): the socket is read again once they are handled.
            asyncio.get_running_loop().call_soon(self._handle_held_frames)
        else:
            transport.resume_reading()

    def _handle_held_frames(self) -> None:
        self._handle_frames()
        if not self.holds.held and (transport := self._open_transport()) is not None:
            transport.resume_reading()

    def send_pending(self, size: int) -> None:
        """A send goes to storage: count it until its receipt (or error) is known."""
        if self.pending_sends.add():
            self.holds.hold(Hold.SENDS)
        self.service.publish_buffer.add(size)

    def send_done(self, size: int) -> None:
        if self.pending_sends.remove() and self.holds.held & Hold.SENDS:
            self.holds.release(Hold.SENDS)
        self.service.publish_buffer.remove(size)

    # -- output -------------------------------------------------------------------------------
    # Frames are gathered and written once per event-loop pass, after the pass's dispatch
    # (loop_pass.FLUSH): under load, hundreds of receipts and messages leave in one system
    # call instead of one call each, and a receipt leaves with the message it released.
    def send_command(self, command: wire.BaseCommand) -> None:
        self._queue_output(encode_frame(command))

    def write_many(self, frames: list[bytes | memoryview]) -> None:
        self._out.extend(frames)
        if not self._flush_scheduled:
            self._schedule_flush()

    def _queue_output(self, frame: bytes) -> None:
        self._out.append(frame)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            if self._passes is None:
                self._passes = loop_pass.current()
            self._passes.defer(loop_pass.FLUSH, self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and (transport := self._open_transport()) is not None:
            transport.writelines(out)

    def close(self) -> None:
        if (transport := self._open_transport()) is not None:
            self._flush()
            transport.close()

    def send_error(self, request_id: int, exc: BrokerError | Exception) -> None:
        code = wire.ServerError.ValueType(exc.code) if isinstance(exc, BrokerError) else wire.UnknownError
        self.send_command(wrap(wire.CommandError(request_id=request_id, error=code, message=str(exc))))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.send_command(
            wrap(wire.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active))
        )

    def next_close_request_id(self) -> int:
        """A request id for a CLOSE_PRODUCER/CLOSE_CONSUMER the broker sends (far above a client's)."""
        if self.close_request_ids is None:
            self.close_request_ids = itertools.count(1 << 40)
        return next(self.close_request_ids)

    def send_close_consumer(self, consumer_id: int) -> None:
        request_id = self.next_close_request_id()
        self.send_command(wrap(wire.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)))

    def forget_consumer(self, consumer_id: int) -> None:
        self.consumers.pop(consumer_id, None)
        if not isinstance(self.gone_consumers, set):  # still the shared empty _NONE_GONE
            self.gone_consumers = set()
        self.gone_consumers.add(consumer_id)

    def forget_producer(self, producer_id: int) -> None:
        """SENDs still on their way for this producer are dropped quietly (it was closed)."""
        if not isinstance(self.gone_producers, set):  # still the shared empty _NONE_GONE
            self.gone_producers = set()
        self.gone_producers.add(producer_id)

    # -- keepalive ----------------------------------------------------------------------------
    def keepalive_tick(self, now: float) -> None:
        """Looked at once per keepalive interval (``keepalive.py``), from its first full one."""
        if self.closed or now - self._since < self.service.keepalive.interval:
            return
        # A connection we do not read (flow control) may have answered: its PONG waits unread.
        if not self.connected or (self._waiting_for_pong and not self.holds.held):
            log.info("%s: keepalive timed out, closing", self.remote)
            self.close()
            return
        self._waiting_for_pong = True
        self._queue_output(_PING)

    # -- dispatch -----------------------------------------------------------------------------
    def _handle(self, frame: Frame) -> None:
        cmd_type = frame.command.type
        if not self.connected:
            if self.auth.refused is not None:  # its credentials were refused at CONNECT
                handshake.answer_refused(self, frame)
                return
            if cmd_type != T.CONNECT:
                raise ProtocolError(f"expected CONNECT first, got {frame.type_name}")
        elif self.auth.worker is not None and not worker_access.allowed(self, frame):
            return  # a worker's own identity: what workers ask of each other only (refused here)
        handler = HANDLERS.get(cmd_type)
        if handler is None:
            raise ProtocolError(f"unsupported command {frame.type_name}")
        # Any traffic proves the peer alive.
        self._waiting_for_pong = False
        if cmd_type in TEXT_CHECKED and (field := undecodable_field(frame.body())) is not None:
            self._refuse_undecodable(frame, field)
            return
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %s %s", self.remote, frame.type_name, frame.body())
        handler(self, frame)

    def _handle_hot_ack(self, ack: HotAck) -> None:
        """The usual ACK, read without protobuf (``protocol.hot_acks``): straight to its
        subscription when that takes it so (the broadcast one), else the full way."""
        consumer = self.consumers.get(ack.consumer_id)
        if (
            self.connected
            and consumer is not None
            and not log.isEnabledFor(logging.DEBUG)
            and consumer.subscription.acknowledge_one(consumer, ack.cumulative, ack.ledger_id, ack.entry_id)
        ):
            self._waiting_for_pong = False
            return
        self._handle(Frame(parse_command(ack.command)))

    def _refuse_undecodable(self, frame: Frame, field: str) -> None:
        """Answer a request whose ``field`` is not valid UTF-8 with an error for that request alone."""
        code = wire.InvalidTopicName if field in ("topic", "namespace") else wire.NotAllowedError
        message = f"{frame.type_name}: {field} is not valid UTF-8"
        log.info("%s: refused %s", self.remote, message)
        body = frame.body()
        reply = error_reply(frame.type, body.request_id, code, message)
        self.send_command(wrap(reply))

    def handle_again(self, frame: Frame) -> None:
        """Handle ``frame`` once more (its topic was opened off the loop: ``handlers.access``)."""
        HANDLERS[frame.command.type](self, frame)

    # -- asked by the rest of the broker --------------------------------------------------------
    def check_credentials(self, now: float) -> None:
        """Every authentication_refresh_check_seconds (service.py): challenge expired credentials
        for fresh ones; a challenge not answered since the last check closes the connection."""
        handshake.check_credentials(self, now)

    def close_producer_by_broker(self, producer_id: int, producer: object) -> None:
        producers.close_by_broker(self, producer_id, producer)
