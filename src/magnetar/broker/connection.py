"""One client connection (Pulsar's ``ServerCnx``): frames in, handlers, frames out.

The connection is an ``asyncio.BufferedProtocol`` (no stream objects, no task per
connection) so that an idle connection costs little: the socket is read straight into
the frame decoder, through a read buffer the broker's connections share, and a large
frame into a buffer of its own. Every command type maps to one handler method through
``_HANDLERS``; a command with no handler is a protocol error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar import __version__
from magnetar.broker import authorization, descriptors, loop_pass
from magnetar.broker.authentication import AuthenticationFailed, AuthenticationProvider
from magnetar.broker.consumer import Consumer
from magnetar.broker.errors import (
    REQUEST_ERRORS,
    BrokerError,
    InvalidTopicNameError,
    NotAllowed,
    PersistenceError,
    as_broker_error,
)
from magnetar.broker.flow_control import Hold, PendingSends, ReadHolds
from magnetar.broker.limits import LimitReached
from magnetar.broker.names import check_name
from magnetar.broker.producer import Producer
from magnetar.broker.request_errors import TEXT_CHECKED, error_reply
from magnetar.protocol import ChecksumMismatch, Frame, FrameDecoder, ProtocolError, wire
from magnetar.protocol.batch import check_message
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import FRAME_OVERHEAD, FrameTooLarge, encode_frame
from magnetar.protocol.headers import metadata_span, parse_metadata, verify_checksum
from magnetar.protocol.message_id import to_u64
from magnetar.protocol.text import undecodable_field, undecodable_metadata
from magnetar.protocol.topic_name import InvalidTopicName, TopicName, topics_hash

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

T = wire.BaseCommand.Type
#: Highest protocol version we speak; we answer min(client's, ours).
PROTOCOL_VERSION = 21
#: The largest frame a connection may send before its CONNECT (a CONNECT is a few hundred bytes;
#: this leaves room for auth data): nobody unknown makes the broker buffer megabytes.
MAX_FRAME_BEFORE_CONNECT = 32 * 1024
_producer_names = itertools.count()
#: AUTH_CHALLENGE's data asking a client for fresh credentials (Pulsar's AuthData.REFRESH_AUTH_DATA).
REFRESH_AUTH_DATA = b"refresh"
#: Pulsar answers a refused CONNECT with request id -1 (as an unsigned 64-bit field).
AUTH_ERROR_REQUEST_ID = (1 << 64) - 1


class ServerCnx(asyncio.BufferedProtocol):
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.config = service.config
        self.decoder = FrameDecoder(MAX_FRAME_BEFORE_CONNECT, service.read_buffer, admission=self)
        self.transport: asyncio.Transport | None = None
        self.remote = "?"
        self.connected = False
        self.closed = False
        self.writable = True
        #: Why the connection is not read right now (flow control, see flow_control.py).
        self.holds = ReadHolds(self._pause_reading, self._resume_reading, service.hold_times)
        self.pending_sends = PendingSends(self.config.max_pending_publish_requests_per_connection)
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._passes: loop_pass.PassScheduler | None = None
        self.protocol_version = 0
        self.wants_entry_metadata = False
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        #: Consumers this connection had (closed by either side): late FLOW/ACK for them is ignored.
        self._gone_consumers: set[int] = set()
        #: Producers the broker closed: SENDs the client had on the way are dropped, not an error.
        self._gone_producers: set[int] = set()
        self._waiting_for_pong = False
        self._keepalive: asyncio.TimerHandle | None = None
        self._close_request_ids = itertools.count(1 << 40)
        #: The frame handled again once its topic was opened off the loop (``_opened_first``).
        self._rerun: Frame | None = None
        #: Why this connection is refused (answered at its CONNECT), None when it is served.
        self._refusal: str | None = None
        #: The client IP this connection is counted under (broker_max_connections...), if counted.
        self._counted_ip: str | None = None
        #: Whether the client came over TLS (the pulsar+ssl:// port), and the certificate it
        #: presented, as ``ssl.SSLSocket.getpeercert()`` gives it: only one the broker verified
        #: against ``tls_trust_certs_file_path``, else None. ``tls_identity.role_from_certificate``
        #: reads the role from it.
        self.tls = False
        self.peer_certificate: dict | None = None
        #: The role its credentials proved (authentication.py); None while authentication is off.
        self.role: str | None = None
        self.auth_method: str | None = None
        self._auth_provider: AuthenticationProvider | None = None
        #: When the credentials stop being valid (Unix time), None if never.
        self.auth_expires_at: float | None = None
        self.supports_auth_refresh = False
        #: An AUTH_CHALLENGE is out and not yet answered with valid credentials.
        self.auth_challenge_pending = False
        self._attempted_method: str | bytes = ""

    # -- asyncio.Protocol ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        self.remote = f"{peer[0]}:{peer[1]}" if peer else "?"
        if self._over_connection_limit(peer[0] if peer else "?"):
            return
        if transport.get_extra_info("sslcontext") is not None:
            self.tls = True
            self.peer_certificate = transport.get_extra_info("peercert") or None
        self.service.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and descriptors.in_reserve(sock.fileno(), descriptors.CONNECTION_RESERVE):
            # Too few descriptors are left to serve one more connection: its CONNECT is answered
            # with an error (an ERROR before CONNECT is dropped by clients), then it is closed.
            descriptors.EXHAUSTION.refused("connection", self.remote)
            self._refusal = "the broker is out of file descriptors: no new connections for now"
            # A peer that sends no CONNECT does not keep the descriptor.
            asyncio.get_running_loop().call_later(self.config.keepalive_interval_seconds or 30, self.close)
            return
        if self.service.publish_buffer.full:
            self.holds.hold(Hold.BROKER)
        self._schedule_keepalive()

    def _over_connection_limit(self, ip: str) -> bool:
        """Past broker_max_connections(_per_ip): refused as Pulsar does, before anything is set up
        for it (an ERROR NotAllowedError at once, then closed); nothing else is affected."""
        refused = self.service.limits.admit_connection(ip)
        if refused is None:
            if self.service.limits.connections.enabled:
                self._counted_ip = ip
            return False
        error = wire.CommandError(request_id=0, error=refused.code, message=str(refused))
        self.transport.write(encode_frame(wrap(error)))
        self.transport.close()
        return True

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        try:
            self.decoder.buffer_updated(nbytes)
        except ProtocolError as exc:
            self._protocol_error(exc)
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
        self.send_command(wrap(wire.CommandError(request_id=0, error=wire.ServiceNotReady, message=message)))
        self.close()

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
                self._handle(frame)
        except ProtocolError as exc:
            self._protocol_error(exc)

    def _protocol_error(self, exc: ProtocolError) -> None:
        before = "" if self.connected else " (before CONNECT)"
        log.warning("%s: protocol error%s, closing: %s", self.remote, before, exc)
        if isinstance(exc, FrameTooLarge):
            self.service.frame_closes["too_large" if self.connected else "too_large_before_connect"] += 1
        self.send_command(wrap(wire.CommandError(request_id=0, error=wire.UnknownError, message=str(exc))))
        self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
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
        self.send_command(wrap(wire.CommandError(request_id=0, error=wire.ServiceNotReady, message=message)))
        self.close()

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
            if consumer.subscription.dispatcher is not None:
                consumer.subscription.dispatcher.on_writable(consumer)

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

    def _send_pending(self, size: int) -> None:
        """A send goes to storage: count it until its receipt (or error) is known."""
        if self.pending_sends.add():
            self.holds.hold(Hold.SENDS)
        self.service.publish_buffer.add(size)

    def _send_done(self, size: int) -> None:
        if self.pending_sends.remove() and self.holds.held & Hold.SENDS:
            self.holds.release(Hold.SENDS)
        self.service.publish_buffer.remove(size)

    # -- output -------------------------------------------------------------------------------
    # Frames are gathered and written once per event-loop pass, after the pass's dispatch
    # (loop_pass.FLUSH): under load, hundreds of receipts and messages leave in one system
    # call instead of one call each, and a receipt leaves with the message it released.
    def send_command(self, command: wire.BaseCommand) -> None:
        self._queue_output(encode_frame(command))

    def write_many(self, frames: list[bytes]) -> None:
        self._out.extend(frames)
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
        code = exc.code if isinstance(exc, BrokerError) else wire.UnknownError
        self.send_command(wrap(wire.CommandError(request_id=request_id, error=code, message=str(exc))))

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        self.send_command(
            wrap(wire.CommandActiveConsumerChange(consumer_id=consumer_id, is_active=is_active))
        )

    def send_close_consumer(self, consumer_id: int) -> None:
        request_id = next(self._close_request_ids)
        self.send_command(wrap(wire.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)))

    def forget_consumer(self, consumer_id: int) -> None:
        self.consumers.pop(consumer_id, None)
        self._gone_consumers.add(consumer_id)

    # -- keepalive ----------------------------------------------------------------------------
    def _schedule_keepalive(self) -> None:
        interval = self.config.keepalive_interval_seconds
        if interval > 0:
            self._keepalive = asyncio.get_running_loop().call_later(interval, self._keepalive_tick)

    def _keepalive_tick(self) -> None:
        if self.closed:
            return
        # A connection we do not read (flow control) may have answered: its PONG waits unread.
        if not self.connected or (self._waiting_for_pong and not self.holds.held):
            log.info("%s: keepalive timed out, closing", self.remote)
            self.close()
            return
        self._waiting_for_pong = True
        self.send_command(wrap(wire.CommandPing()))
        self._schedule_keepalive()

    # -- dispatch -----------------------------------------------------------------------------
    def _handle(self, frame: Frame) -> None:
        cmd_type = frame.command.type
        if not self.connected and cmd_type != T.CONNECT:
            raise ProtocolError(f"expected CONNECT first, got {frame.type_name}")
        handler = _HANDLERS.get(cmd_type)
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

    def _refuse_undecodable(self, frame: Frame, field: str) -> None:
        """Answer a request whose ``field`` is not valid UTF-8 with an error for that request alone."""
        code = wire.InvalidTopicName if field in ("topic", "namespace") else wire.NotAllowedError
        message = f"{frame.type_name}: {field} is not valid UTF-8"
        log.info("%s: refused %s", self.remote, message)
        body = frame.body()
        reply = error_reply(frame.type, body.request_id, code, message)
        self.send_command(wrap(reply))

    def _handle_connect(self, frame: Frame) -> None:
        if self.connected:
            raise ProtocolError("CONNECT received twice")
        cmd: wire.CommandConnect = frame.command.connect
        self.protocol_version = negotiated_version(cmd.protocol_version)
        if self.service.authentication is not None and not self._authenticate_connect(cmd):
            return
        self.wants_entry_metadata = (
            self.config.expose_entry_metadata_to_client
            and cmd.HasField("feature_flags")
            and cmd.feature_flags.supports_broker_entry_metadata
        )
        self.connected = True
        reply = wire.CommandConnected(
            server_version=f"Magnetar {__version__}",
            protocol_version=self.protocol_version,
            max_message_size=self.config.max_message_size,
        )
        reply.feature_flags.supports_broker_entry_metadata = True
        self.send_command(wrap(reply))
        self.decoder.max_frame_size = self.config.max_message_size + FRAME_OVERHEAD

    # -- authentication (authentication.py; Pulsar's ServerCnx.doAuthentication) ---------------
    def _authenticate_connect(self, cmd: wire.CommandConnect) -> bool:
        """Check CONNECT's credentials; a refusal is answered (AuthenticationError) and closes."""
        method = cmd.auth_method_name if cmd.HasField("auth_method_name") else "none"
        self._attempted_method = method
        self.supports_auth_refresh = cmd.HasField("feature_flags") and cmd.feature_flags.supports_auth_refresh
        try:
            role, provider = self._authenticate(method, cmd.auth_data)
        except AuthenticationFailed as exc:
            self._authentication_failed(str(exc))
            return False
        self.role, self.auth_method, self._auth_provider = role, method, provider
        self.auth_expires_at = provider.expires_at(cmd.auth_data)
        self.service.authentication_successes[method] += 1
        log.info("%s: authenticated as %r with %s", self.remote, role, method)
        return True

    def _authenticate(self, method: str | bytes, auth_data: bytes) -> tuple[str, AuthenticationProvider]:
        if isinstance(method, bytes):
            raise AuthenticationFailed("auth_method_name is not valid UTF-8")
        assert self.service.authentication is not None
        return self.service.authentication.authenticate(method, auth_data, self.peer_certificate)

    def _authentication_failed(self, message: str) -> None:
        log.info("%s: authentication refused, closing: %s", self.remote, message)
        self.service.authentication_failures[self._method_label()] += 1
        error = wire.CommandError(
            request_id=AUTH_ERROR_REQUEST_ID, error=wire.AuthenticationError, message=message
        )
        self.send_command(wrap(error))
        self.close()
        # Frames that came in the same read (a PRODUCER pipelined behind a refused AUTH_RESPONSE)
        # are not handled: this connection is done before the transport reports it lost.
        self.closed = True

    def _method_label(self) -> str:
        """The auth method for the metrics' label: an enabled one, else "other" (no label per
        name a client made up)."""
        assert self.service.authentication is not None
        method = self._attempted_method
        return method if method in self.service.authentication.providers else "other"

    def check_credentials(self, now: float) -> None:
        """Every authentication_refresh_check_seconds (service.py): challenge expired credentials
        for fresh ones; a challenge not answered since the last check closes the connection."""
        if self.closed or self.role is None or self.auth_expires_at is None:
            return
        if self.auth_challenge_pending:
            if self.holds.held:  # not read now (flow control): its answer may be waiting unread
                return
            self._authentication_failed("timed out waiting for refreshed credentials (AUTH_RESPONSE)")
            return
        if self.auth_expires_at > now:
            return
        if not self.supports_auth_refresh:
            self._authentication_failed("the credentials expired and the client cannot refresh them")
            return
        self.auth_challenge_pending = True
        challenge = wire.CommandAuthChallenge(
            server_version=f"Magnetar {__version__}", protocol_version=self.protocol_version
        )
        challenge.challenge.auth_method_name = self.auth_method or ""
        challenge.challenge.auth_data = REFRESH_AUTH_DATA
        self.send_command(wrap(challenge))

    def _handle_auth_response(self, frame: Frame) -> None:
        cmd: wire.CommandAuthResponse = frame.command.auth_response
        if self.role is None:
            raise ProtocolError("AUTH_RESPONSE while authentication is off")
        if not cmd.HasField("response"):
            self._authentication_failed("AUTH_RESPONSE carries no credentials")
            return
        method = cmd.response.auth_method_name if cmd.response.HasField("auth_method_name") else ""
        self._attempted_method = method
        try:
            if method != self.auth_method:
                raise AuthenticationFailed(
                    f"AUTH_RESPONSE for method {method!r}, connected with {self.auth_method!r}"
                )
            role, provider = self._authenticate(method, cmd.response.auth_data)
        except AuthenticationFailed as exc:
            self._authentication_failed(str(exc))
            return
        if role != self.role:  # as Pulsar: the principal cannot change on a refresh
            self._authentication_failed(f"refreshed credentials are for role {role!r}, not {self.role!r}")
            return
        self.auth_expires_at = provider.expires_at(cmd.response.auth_data)
        self.auth_challenge_pending = False
        self.service.authentication_successes[method] += 1
        log.debug("%s: refreshed credentials of %r", self.remote, role)

    def _handle_ping(self, frame: Frame) -> None:
        self.send_command(wrap(wire.CommandPong()))

    def _handle_pong(self, frame: Frame) -> None:
        pass

    def _handle_partitioned_metadata(self, frame: Frame) -> None:
        cmd = frame.command.partitioned_metadata
        reply = wire.CommandPartitionedTopicMetadataResponse(request_id=cmd.request_id)
        try:
            topic = self._topic_name(cmd.topic)
            self._authorize(topic, authorization.LOOKUP, "partitioned_metadata", "Get Partition Metadata")
            reply.partitions = self.service.partitions_of(topic, cmd.metadata_auto_creation_enabled)
            reply.response = wire.CommandPartitionedTopicMetadataResponse.Success
        except BrokerError as exc:
            reply.response = wire.CommandPartitionedTopicMetadataResponse.Failed
            reply.error = exc.code
            reply.message = str(exc)
        self.send_command(wrap(reply))

    def _handle_lookup(self, frame: Frame) -> None:
        cmd = frame.command.lookup
        reply = wire.CommandLookupTopicResponse(request_id=cmd.request_id)
        try:
            topic = self._topic_name(cmd.topic)
            self._authorize(topic, authorization.LOOKUP, "lookup", "Lookup")
            reply.response = wire.CommandLookupTopicResponse.Connect
            if (url := self.service.service_url) is not None:  # None: TLS only
                reply.broker_service_url = url
            if (tls_url := self.service.service_url_tls) is not None:
                # Clients on pulsar+ssl:// connect here (the official ones take this field then).
                reply.broker_service_url_tls = tls_url
            reply.authoritative = True
            reply.proxy_through_service_url = False
        except BrokerError as exc:
            reply.response = wire.CommandLookupTopicResponse.Failed
            reply.error = exc.code
            reply.message = str(exc)
        self.send_command(wrap(reply))

    # -- producers ----------------------------------------------------------------------------
    def _handle_producer(self, frame: Frame) -> None:
        cmd = frame.command.producer
        try:
            check_name(cmd.producer_name, "producer name")  # before anything is opened for it
            self._authorize_name(cmd.topic, authorization.PRODUCE, "produce", "Produce")
        except BrokerError as exc:
            self.send_error(cmd.request_id, exc)
            return
        if self._opened_first(frame, cmd.topic, cmd.request_id):
            return
        try:
            if cmd.producer_id in self.producers:
                existing = self.producers[cmd.producer_id]
                # A retried request for a producer we already created: answer the same.
                self._producer_success(
                    cmd.request_id, existing, ready=existing in existing.topic.producers.values()
                )
                return
            topic = self.service.get_topic(self._topic_name(cmd.topic), create=True)
            self._check_producer_limits(topic)
            schema = cmd.schema if cmd.HasField("schema") else None
            schema_version = self.service.schemas.for_producer(topic.name, schema)
            user_named = bool(cmd.producer_name)
            name = cmd.producer_name or f"{self.service.broker_name}-{next(_producer_names)}"
            producer = Producer(self, topic, cmd.producer_id, name, user_named, cmd.producer_access_mode)
            producer.schema_version = schema_version
            producer.on_ready = lambda: self._producer_success(cmd.request_id, producer, ready=True)
            ready = topic.add_producer(producer)
        except REQUEST_ERRORS as exc:
            self.send_error(cmd.request_id, as_broker_error(exc, f"creating a producer on {cmd.topic}"))
            return
        self.producers[cmd.producer_id] = producer
        self._producer_success(cmd.request_id, producer, ready)

    def _producer_success(self, request_id: int, producer: Producer, ready: bool = True) -> None:
        reply = wire.CommandProducerSuccess(
            request_id=request_id,
            producer_name=producer.name,
            last_sequence_id=producer.topic.last_sequence_id(producer.name),
            producer_ready=ready,
        )
        if producer.access_mode != wire.Shared:
            reply.topic_epoch = producer.topic.topic_epoch
        if producer.schema_version is not None:
            reply.schema_version = producer.schema_version
        self.send_command(wrap(reply))

    def close_producer_by_broker(self, producer: Producer) -> None:
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            self._gone_producers.add(producer.producer_id)
            request_id = next(self._close_request_ids)
            self.send_command(
                wrap(wire.CommandCloseProducer(producer_id=producer.producer_id, request_id=request_id))
            )

    def _handle_send(self, frame: Frame) -> None:
        cmd = frame.command.send
        producer = self.producers.get(cmd.producer_id)
        if producer is None:
            if cmd.producer_id in self._gone_producers:
                return  # sent before the client saw our CLOSE_PRODUCER: it resends after reconnecting
            raise ProtocolError(f"SEND for unknown producer id {cmd.producer_id}")
        payload = frame.payload
        if payload is None:
            raise ProtocolError("SEND without a message")
        pending = producer.expect(cmd.sequence_id, cmd.highest_sequence_id)
        try:
            verify_checksum(payload)
            metadata, body = parse_metadata(payload)
            if (field := undecodable_metadata(metadata)) is not None:
                raise ProtocolError(f"message metadata {field} is not valid UTF-8")
            # The limit is on metadata + payload, as the client sizes chunks by it; chunks are
            # bounded by the frame limit alone (max_message_size + 10 KiB).
            size = len(payload) - metadata_span(payload)[0]  # metadata + payload, no re-serializing
            if size > self.config.max_message_size and not (cmd.is_chunk or metadata.HasField("chunk_id")):
                raise BrokerError(
                    f"Exceed maximum message size: {size} > {self.config.max_message_size}",
                    wire.NotAllowedError,
                )
            # A batch a consumer cannot take apart would crash it (the C++ client reads past its buffer).
            config = self.config
            if config.validate_batches_on_publish:
                check_message(metadata, body, config.max_messages_per_batch, config.max_message_size)
        except ChecksumMismatch as exc:
            log.warning("%s: %s (producer %s, sequence %d)", self.remote, exc, producer.name, cmd.sequence_id)
            producer.complete(pending, None, (wire.ChecksumError, str(exc)))
            return
        except ProtocolError as exc:
            producer.complete(pending, None, (wire.NotAllowedError, f"invalid message: {exc}"))
            return
        except BrokerError as exc:
            producer.complete(pending, None, (exc.code, str(exc)))
            return
        if producer.refusing_sends:  # an earlier send was not stored: this producer is being closed
            producer.not_stored(pending)
            return
        if producer.topic.terminated:
            producer.complete(
                pending, None, (wire.TopicTerminatedError, f"Topic {producer.topic.name} is terminated")
            )
            return
        num_messages = cmd.num_messages if cmd.HasField("num_messages") else 1
        size = len(payload)
        mine = producer.traffic
        mine.messages_in += num_messages
        mine.bytes_in += size
        traffic = producer.topic.traffic
        traffic.messages_in += num_messages
        traffic.bytes_in += size
        self._send_pending(size)

        def stored(position, exc) -> None:
            self._send_done(size)
            if exc is not None:  # the managed ledger logged it (once per episode)
                producer.not_stored(pending)
            else:
                producer.complete(pending, position, None)

        try:
            producer.topic.publish(producer, cmd, payload, stored, metadata)
        except REQUEST_ERRORS:  # storage refused the write (a full disk, a closed ledger ...)
            self._send_done(size)
            producer.not_stored(pending)
        except Exception:
            log.exception("%s: storing a message failed", producer.topic.name)
            self._send_done(size)
            producer.not_stored(pending)

    def _handle_close_producer(self, frame: Frame) -> None:
        cmd = frame.command.close_producer
        producer = self.producers.pop(cmd.producer_id, None)
        if producer is not None:
            producer.closed = True
            producer.topic.remove_producer(producer)
        self.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))

    # -- consumers ----------------------------------------------------------------------------
    def _handle_subscribe(self, frame: Frame) -> None:
        cmd = frame.command.subscribe
        if cmd.consumer_id in self.consumers:
            # The client retried a subscribe that already succeeded.
            self.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))
            return
        try:  # before anything is opened or created for them
            check_name(cmd.subscription, "subscription name")
            check_name(cmd.consumer_name, "consumer name")
            self._authorize_name(cmd.topic, authorization.CONSUME, "subscribe", "subscribe")
            self._check_consumer_limits(cmd.topic, cmd.subscription)  # a refused one creates nothing
        except BrokerError as exc:
            self.send_error(cmd.request_id, exc)
            return
        initial = "earliest" if cmd.initial_position == wire.CommandSubscribe.Earliest else "latest"
        subscription = (cmd.subscription, initial) if cmd.durable else None
        if self._opened_first(frame, cmd.topic, cmd.request_id, subscription):
            return
        try:
            topic = self.service.get_topic(self._topic_name(cmd.topic), create=True)
            if cmd.HasField("schema"):
                self.service.schemas.for_subscribe(topic, cmd.schema)
            name = cmd.consumer_name or f"consumer-{cmd.consumer_id}"

            def make(subscription) -> Consumer:
                meta = cmd.key_shared_meta if cmd.HasField("key_shared_meta") else None
                return Consumer(self, subscription, cmd.consumer_id, name, cmd.priority_level, meta)

            consumer = topic.subscribe(make, cmd)
        except REQUEST_ERRORS as exc:
            what = f"subscribing {cmd.subscription} to {cmd.topic}"
            self.send_error(cmd.request_id, as_broker_error(exc, what))
            return
        self.consumers[cmd.consumer_id] = consumer
        self.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))
        if topic.terminated:  # after the SUCCESS, so the client knows the consumer id
            consumer.subscription.check_end_of_topic()

    def _live_consumer(self, consumer_id: int) -> Consumer | None:
        """The consumer, None if it was closed (late commands are normal), else a protocol error."""
        consumer = self.consumers.get(consumer_id)
        if consumer is None and consumer_id not in self._gone_consumers:
            raise ProtocolError(f"unknown consumer id {consumer_id}")
        return consumer

    def _handle_flow(self, frame: Frame) -> None:
        cmd = frame.command.flow
        consumer = self._live_consumer(cmd.consumer_id)
        if consumer is None:
            return
        consumer.subscription.flow(consumer, cmd.message_permits)

    def _handle_ack(self, frame: Frame) -> None:
        cmd = frame.command.ack
        consumer = self._live_consumer(cmd.consumer_id)
        error: BrokerError | None = None
        if consumer is not None:
            try:
                consumer.subscription.acknowledge(cmd, consumer)
            except BrokerError as exc:
                error = exc
        if cmd.HasField("request_id"):
            reply = wire.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=cmd.request_id)
            if error is not None:
                reply.error = error.code
                reply.message = str(error)
            elif consumer is None:
                reply.error = wire.ConsumerNotFound
                reply.message = f"unknown consumer id {cmd.consumer_id}"
            self.send_command(wrap(reply))

    def _handle_redeliver_unacknowledged_messages(self, frame: Frame) -> None:
        cmd = frame.command.redeliver_unacknowledged_messages
        consumer = self._live_consumer(cmd.consumer_id)
        if consumer is not None:
            consumer.subscription.redeliver(consumer, list(cmd.message_ids))

    def _handle_close_consumer(self, frame: Frame) -> None:
        cmd = frame.command.close_consumer
        consumer = self.consumers.pop(cmd.consumer_id, None)
        self._gone_consumers.add(cmd.consumer_id)
        if consumer is not None:
            consumer.subscription.remove_consumer(consumer)
        self.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))

    def _handle_unsubscribe(self, frame: Frame) -> None:
        cmd = frame.command.unsubscribe
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            self.send_error(cmd.request_id, BrokerError("unknown consumer", wire.ConsumerNotFound))
            return
        try:
            consumer.subscription.unsubscribe(consumer)
        except BrokerError as exc:
            self.send_error(cmd.request_id, exc)
            return
        self.forget_consumer(cmd.consumer_id)
        self.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))

    def _handle_get_last_message_id(self, frame: Frame) -> None:
        cmd = frame.command.get_last_message_id
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            self.send_error(cmd.request_id, BrokerError("unknown consumer", wire.ConsumerNotFound))
            return
        topic = consumer.subscription.topic
        if topic.ml is None:
            self.send_error(cmd.request_id, NotAllowed("non-persistent topics keep no last message id"))
            return
        position, batch_index = topic.last_message_position()
        last = wire.MessageIdData(ledger_id=to_u64(position.ledger_id), entry_id=to_u64(position.entry_id))
        if batch_index >= 0:
            last.batch_index = batch_index
        if topic.partition_index >= 0:
            last.partition = topic.partition_index
        reply = wire.CommandGetLastMessageIdResponse(request_id=cmd.request_id, last_message_id=last)
        mark = consumer.subscription.cursor.mark_delete_position
        reply.consumer_mark_delete_position.CopyFrom(
            wire.MessageIdData(ledger_id=to_u64(mark.ledger_id), entry_id=to_u64(mark.entry_id))
        )
        self.send_command(wrap(reply))

    def _handle_seek(self, frame: Frame) -> None:
        cmd = frame.command.seek
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            self.send_error(cmd.request_id, BrokerError("unknown consumer", wire.ConsumerNotFound))
            return
        subscription = consumer.subscription
        topic = subscription.topic
        try:
            if cmd.HasField("message_id"):
                position = topic.seek_position(cmd.message_id)
            elif cmd.HasField("message_publish_time"):
                position = topic.find_position_by_time(cmd.message_publish_time)
            else:
                raise BrokerError("seek needs a message id or a publish time", wire.NotAllowedError)
            subscription.reset_cursor(position)
        except BrokerError as exc:
            self.send_error(cmd.request_id, exc)
            return
        self.send_command(wrap(wire.CommandSuccess(request_id=cmd.request_id)))

    def _handle_consumer_stats(self, frame: Frame) -> None:
        cmd = frame.command.consumer_stats
        reply = wire.CommandConsumerStatsResponse(request_id=cmd.request_id)
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            reply.error_code = wire.ConsumerNotFound
            reply.error_message = f"unknown consumer id {cmd.consumer_id}"
        else:
            reply.consumer_name = consumer.name
            reply.available_permits = max(consumer.permits, 0)
            reply.unacked_messages = sum(consumer.pending_acks.values())
            cursor = consumer.subscription.cursor
            reply.msg_backlog = cursor.backlog() if cursor is not None else 0
            reply.address = self.remote
        self.send_command(wrap(reply))

    def _handle_get_topics_of_namespace(self, frame: Frame) -> None:
        cmd = frame.command.get_topics_of_namespace
        try:
            authz = self.service.authorization
            if authz is not None and not authz.can_list_topics(cmd.namespace, self.role):
                self._refuse_unauthorized("get_topics", "Get Topics Of Namespace", cmd.namespace)
            topics = self.service.topic_list(cmd.namespace, cmd.mode)
        except BrokerError as exc:
            self.send_error(cmd.request_id, exc)
            return
        digest = topics_hash(topics)
        reply = wire.CommandGetTopicsOfNamespaceResponse(
            request_id=cmd.request_id, filtered=False, topics_hash=digest
        )
        if cmd.HasField("topics_hash") and cmd.topics_hash == digest:
            reply.changed = False
        else:
            reply.topics.extend(topics)
        self.send_command(wrap(reply))

    # -- schemas ------------------------------------------------------------------------------
    def _handle_get_schema(self, frame: Frame) -> None:
        self.send_command(wrap(self.service.schemas.get_schema_response(frame.command.get_schema)))

    def _handle_get_or_create_schema(self, frame: Frame) -> None:
        cmd = frame.command.get_or_create_schema
        reply = wire.CommandGetOrCreateSchemaResponse(request_id=cmd.request_id)
        try:
            # Pulsar's broker checks nothing here, but adds schemas to existing topics only; ours
            # creates the topic, so only a role that may produce there may ask.
            self._authorize_name(cmd.topic, authorization.PRODUCE, "produce", "Produce")
        except BrokerError as exc:
            reply.error_code = exc.code
            reply.error_message = str(exc)
            self.send_command(wrap(reply))
            return
        if self._opened_first(frame, cmd.topic, cmd.request_id):
            return
        try:
            topic = self.service.get_topic(self._topic_name(cmd.topic), create=True)
            reply.schema_version = self.service.schemas.for_producer(topic.name, cmd.schema) or b""
        except BrokerError as exc:
            reply.error_code = exc.code
            reply.error_message = str(exc)
        self.send_command(wrap(reply))

    # -- authorization (authorization.py) ------------------------------------------------------
    def _authorize(self, topic: TopicName, operation: str, label: str, what: str) -> None:
        """Raise AuthorizationError (Pulsar's "Client is not authorized to ...") unless this
        connection's role may do ``operation`` on ``topic``; nothing is checked while authorization is off."""
        authz = self.service.authorization
        if authz is not None and not authz.can_topic(topic, self.role, operation):
            self._refuse_unauthorized(label, what, str(topic))

    def _authorize_name(self, topic: str, operation: str, label: str, what: str) -> None:
        """As ``_authorize`` for a topic named by the client (a bad name is left to the handler)."""
        if self.service.authorization is None:
            return
        try:
            name = TopicName.parse(topic)
        except InvalidTopicName:
            return
        self._authorize(name, operation, label, what)

    def _refuse_unauthorized(self, label: str, what: str, target: str) -> None:
        self.service.authorization_failures[label] += 1
        log.info("%s: role %r is not authorized to %s on %s", self.remote, self.role, what, target)
        raise authorization.AuthorizationError(f"Client is not authorized to {what}")

    # -- helpers ------------------------------------------------------------------------------
    def _opened_first(
        self, frame: Frame, topic: str, request_id: int, subscription: tuple[str, str] | None = None
    ) -> bool:
        """True when the topic (or a new durable subscription) is first opened off the loop
        (``BrokerService.preparing``): ``frame`` is then handled again once it is, and other
        commands, on this connection and every other, go on meanwhile."""
        if frame is self._rerun:
            return False
        try:
            name = TopicName.parse(topic)
        except InvalidTopicName:
            return False  # the handler answers the error
        preparing = self.service.preparing(name, subscription)
        if preparing is None:
            return False

        def done(future) -> None:
            if self.closed:
                return
            exc = None if future.cancelled() else future.exception()
            if isinstance(exc, (PersistenceError, LimitReached)) or (
                exc is not None and not isinstance(exc, BrokerError)
            ):
                # Storage failed (a full disk, no descriptors left): answered here, not opened again
                # on the loop. Other refusals (no such topic ...) the handler answers on its rerun.
                failed = as_broker_error(exc, f"opening {topic}")
                self.send_command(wrap(error_reply(frame.type, request_id, failed.code, str(failed))))
                return
            self._rerun = frame
            try:
                _HANDLERS[frame.command.type](self, frame)
            except ProtocolError as exc:
                self._protocol_error(exc)
            except Exception as exc:  # the topic could not be loaded: this request fails, nothing else
                log.exception("%s: handling %s for %s failed", self.remote, frame.type_name, topic)
                failed = BrokerError(f"loading {topic} failed: {exc}", wire.ServiceNotReady)
                self.send_error(request_id, failed)
            finally:
                self._rerun = None

        preparing.add_done_callback(done)
        return True

    def _check_producer_limits(self, topic) -> None:
        """Raise LimitReached (ProducerBusy) when one more producer is past a limit (limits.py)."""
        policies = self.service.namespaces.policies(topic.name.namespace_name)
        namespace_max = policies.max_producers_per_topic
        on_topic, here = len(topic.producers), len(self.producers)
        self.service.limits.check_producer(str(topic.name), on_topic, here, namespace_max, self.remote)

    def _check_consumer_limits(self, topic_name: str, subscription: str) -> None:
        """Raise LimitReached (ConsumerBusy) when one more consumer is past a limit (limits.py);
        a topic not loaded has no consumer yet."""
        try:
            name = TopicName.parse(topic_name)
        except InvalidTopicName:
            return  # the handler answers the error
        policies = self.service.namespaces.policies(name.namespace_name)
        topic = self.service.topics.get(str(name))
        subscriptions = topic.subscriptions if topic is not None else {}
        existing = subscriptions.get(subscription)
        counts = (
            lambda: sum(len(s.consumers) for s in subscriptions.values()),
            len(existing.consumers) if existing is not None else 0,
            len(self.consumers),
        )
        namespace_max = (policies.max_consumers_per_topic, policies.max_consumers_per_subscription)
        self.service.limits.check_consumer(str(name), subscription, counts, namespace_max, self.remote)

    def _topic_name(self, name: str) -> TopicName:
        try:
            return TopicName.parse(name)
        except InvalidTopicName as exc:
            raise InvalidTopicNameError(str(exc)) from None


def negotiated_version(client_version: int) -> int:
    """The protocol version CONNECTED answers: min(client's, ours), as Pulsar's broker does, and
    never below 0 (Pulsar's lowest, v0; a negative version names no protocol)."""
    return max(0, min(client_version, PROTOCOL_VERSION))


def _handler_table() -> dict[int, Callable[[ServerCnx, Frame], None]]:
    table = {}
    for name, number in T.items():
        method = getattr(ServerCnx, f"_handle_{name.lower()}", None)
        if method is not None:
            table[number] = method
    return table


_HANDLERS = _handler_table()
