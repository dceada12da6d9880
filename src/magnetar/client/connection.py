"""One asyncio connection to a broker.

Framing goes through the sans-IO ``FrameDecoder``; this module only moves bytes and routes
commands: answers to requests (matched by request id) complete pending futures; SEND_RECEIPT
/ SEND_ERROR / CLOSE_PRODUCER go to the registered producer, MESSAGE / CLOSE_CONSUMER /
ACTIVE_CONSUMER_CHANGE to the registered consumer. The socket is read straight into the
decoder (``receiving.ReceiveProtocol``), whose frames are dispatched as each read comes; a
keep-alive task PINGs every ``keepalive_interval`` and, checking at each, closes a connection
from which nothing (not even a PONG) has come for over two intervals. When the connection
closes, for whatever reason, every pending request fails with ``ConnectionClosed`` and every
registered handler hears about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.client.errors import ConnectError, ConnectionClosed, HttpPortError, Timeout, server_error
from magnetar.client.receiving import ReceiveProtocol, shared_read_buffer
from magnetar.client.tls import TlsError
from magnetar.protocol import commands
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.frames import FRAME_OVERHEAD, Frame, FrameDecoder, encode_frame, encode_frame_parts
from magnetar.protocol.hot_acks import HotAck, HotMessage

if TYPE_CHECKING:
    from magnetar.client.authentication import Authentication

log = logging.getLogger(__name__)

CLIENT_VERSION = "magnetar-python-0.1.0"
PROTOCOL_VERSION = 20
#: What the official clients assume when CONNECTED carries no max_message_size.
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024 - 10 * 1024

T = wire.BaseCommand


class ProducerHandler(Protocol):
    def on_send_receipt(self, cnx: Connection, receipt: wire.CommandSendReceipt) -> None: ...
    def on_send_error(self, cnx: Connection, error: wire.CommandSendError) -> None: ...
    def on_close_by_broker(self, cnx: Connection) -> None: ...
    def on_connection_closed(self, cnx: Connection) -> None: ...


class ConsumerHandler(Protocol):
    def on_message(self, cnx: Connection, message: wire.CommandMessage, payload: memoryview) -> None: ...
    def on_close_by_broker(self, cnx: Connection) -> None: ...
    def on_active_consumer_change(self, cnx: Connection, is_active: bool) -> None: ...
    def on_reached_end_of_topic(self, cnx: Connection) -> None: ...
    def on_connection_closed(self, cnx: Connection) -> None: ...


#: Command types that answer a request, with the field of their body holding the request id.
_RESPONSES = {
    T.SUCCESS,
    T.ERROR,
    T.PRODUCER_SUCCESS,
    T.LOOKUP_RESPONSE,
    T.PARTITIONED_METADATA_RESPONSE,
    T.GET_LAST_MESSAGE_ID_RESPONSE,
    T.CONSUMER_STATS_RESPONSE,
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
    T.GET_SCHEMA_RESPONSE,
    T.GET_OR_CREATE_SCHEMA_RESPONSE,
    T.ACK_RESPONSE,
}


def _response_error(frame: Frame) -> Exception | None:
    """The error an answer carries, if it is one."""
    body = frame.body()
    if frame.type == T.ERROR:
        return server_error(body.error, body.message)
    if frame.type == T.LOOKUP_RESPONSE and body.response == wire.CommandLookupTopicResponse.Failed:
        return server_error(body.error, body.message)
    if (
        frame.type == T.PARTITIONED_METADATA_RESPONSE
        and body.response == wire.CommandPartitionedTopicMetadataResponse.Failed
    ):
        return server_error(body.error, body.message)
    if frame.type in (T.GET_SCHEMA_RESPONSE, T.GET_OR_CREATE_SCHEMA_RESPONSE) and body.HasField("error_code"):
        return server_error(body.error_code, body.error_message)
    if frame.type == T.ACK_RESPONSE and body.HasField("error"):
        return server_error(body.error, body.message)
    return None


def _tls_reason(exc: ssl.SSLError) -> str:
    """OpenSSL's reason (``certificate verify failed: unable to get local issuer certificate``)."""
    verify_message = getattr(exc, "verify_message", None)
    return f"{exc.reason}: {verify_message}" if verify_message else str(exc)


_HTTP = b"HTTP/"  # read as a frame length, b"HTTP" is 1213486160 bytes


def _http_answer(address: str, head: bytes) -> str:
    """Why a CONNECT answered with HTTP failed, with the status line the server sent."""
    status = head.split(b"\r\n", 1)[0][:80].decode("latin-1")
    return (
        f"{address} answered with HTTP ({status!r}): is this the admin port? The binary protocol "
        "is usually on 6650 (pulsar://host:6650; pulsar+ssl://host:6651 for TLS)"
    )


class Connection:
    """A connected, handshaken link to one broker; create it with ``Connection.open``."""

    def __init__(
        self,
        receiver: ReceiveProtocol,
        transport: asyncio.Transport,
        *,
        address: str,
        operation_timeout: float = 30.0,
        keepalive_interval: float = 30.0,
        authentication: Authentication | None = None,
    ) -> None:
        self.address = address
        self.authentication = authentication
        self.operation_timeout = operation_timeout
        self.keepalive_interval = keepalive_interval
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.server_version = ""
        self.server_protocol_version = 0
        self._receiver = receiver
        self._transport = transport
        self._decoder = receiver.decoder
        self._request_ids = itertools.count()
        self._pending: dict[int, asyncio.Future] = {}
        self._producers: dict[int, ProducerHandler] = {}
        self._consumers: dict[int, ConsumerHandler] = {}
        self._last_received = time.monotonic()
        self._tasks: list[asyncio.Task] = []
        self._closed = asyncio.get_running_loop().create_future()
        self.close_reason: BaseException | None = None

    # --- lifecycle --------------------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        address: str | None = None,
        proxy_to_broker_url: str | None = None,
        connection_timeout: float = 10.0,
        operation_timeout: float = 30.0,
        keepalive_interval: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        authentication: Authentication | None = None,
    ) -> Connection:
        """Open a TCP connection (TLS with ``ssl_context``), send CONNECT and wait for CONNECTED.

        ``authentication`` (``auth_method_name``, ``auth_data()``) fills CONNECT's auth fields.
        """
        receiver = ReceiveProtocol(
            FrameDecoder(
                DEFAULT_MAX_MESSAGE_SIZE + FRAME_OVERHEAD, shared_read_buffer(asyncio.get_running_loop())
            )
        )
        transport = await _open_transport(receiver, host, port, ssl_context, connection_timeout)
        cnx = cls(
            receiver,
            transport,
            address=address or f"pulsar://{host}:{port}",
            operation_timeout=operation_timeout,
            keepalive_interval=keepalive_interval,
            authentication=authentication,
        )
        try:
            async with asyncio.timeout(connection_timeout):
                await cnx._handshake(proxy_to_broker_url)
        except BaseException as exc:
            cnx._abort(exc)
            if isinstance(exc, asyncio.TimeoutError):
                raise ConnectError(f"no CONNECTED from {host}:{port} in {connection_timeout}s") from None
            if isinstance(exc, ssl.SSLError):
                # With TLS 1.3 the broker checks our certificate after our side of the handshake.
                raise TlsError(f"{host}:{port} refused the TLS connection: {_tls_reason(exc)}") from None
            if ssl_context is not None and isinstance(exc, ConnectionError):
                # The same refusal, when the broker's alert is followed by a reset before we read it.
                raise TlsError(
                    f"{host}:{port} refused the TLS connection ({exc!r}): it may require a client "
                    "certificate its CAs trust (authentication=AuthenticationTLS(...))"
                ) from None
            raise
        receiver.start(cnx._frames_received, cnx._connection_lost)
        cnx._tasks = [
            asyncio.create_task(cnx._keepalive_loop(), name=f"magnetar-keepalive-{cnx.address}"),
        ]
        return cnx

    async def _handshake(self, proxy_to_broker_url: str | None) -> None:
        connect = wire.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        connect.feature_flags.supports_broker_entry_metadata = True
        connect.feature_flags.supports_partial_producer = True
        if self.authentication is not None:
            connect.auth_method_name = self.authentication.auth_method_name
            if data := self.authentication.auth_data():  # none for TLS: the certificate speaks
                connect.auth_data = data
            connect.feature_flags.supports_auth_refresh = True
        if proxy_to_broker_url:
            connect.proxy_to_broker_url = proxy_to_broker_url
        self._transport.write(encode_frame(commands.wrap(connect)))
        head: bytes | None = b""  # the answer's first bytes, held until they show it is not HTTP
        while True:
            data = await self._receiver.read()
            if not data:
                if self._transport.get_extra_info("sslcontext") is not None:
                    # TLS 1.3: a broker that wants a trusted client certificate closes here.
                    raise TlsError(
                        f"{self.address} refused the TLS connection after the handshake: it may require "
                        "a client certificate its CAs trust (authentication=AuthenticationTLS(...))"
                    )
                raise ConnectError(
                    f"{self.address} closed the connection during the handshake "
                    "(if that is the broker's TLS port, use a pulsar+ssl:// URL)"
                )
            if head is not None:
                head += data
                if len(head) < len(_HTTP) and _HTTP.startswith(head):
                    continue
                if head.startswith(_HTTP):
                    raise HttpPortError(_http_answer(self.address, head))
                data, head = head, None
            self._decoder.feed(data)
            frame = _plain(self._decoder.next_frame())
            if frame is None:
                continue
            if frame.type == T.ERROR:
                body = frame.body()
                raise server_error(body.error, body.message)
            if frame.type != T.CONNECTED:
                raise ConnectError(f"{self.address} answered CONNECT with {frame.type_name}")
            self._connected(frame.body())
            # Anything after CONNECTED is dispatched once the receiver starts (``open``).
            return

    def _connected(self, body: wire.CommandConnected) -> None:
        self.server_version = body.server_version
        self.server_protocol_version = body.protocol_version
        if body.HasField("max_message_size") and body.max_message_size > 0:
            self.max_message_size = body.max_message_size
            self._decoder.max_frame_size = body.max_message_size + FRAME_OVERHEAD

    @property
    def is_closed(self) -> bool:
        return self._closed.done()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    async def close(self) -> None:
        """Close the connection; pending requests fail and handlers are told."""
        self._abort(ConnectionClosed(f"connection to {self.address} closed"))
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _abort(self, reason: BaseException) -> None:
        if self._closed.done():
            return
        self.close_reason = reason
        self._closed.set_result(None)
        self._receiver.stop()
        with contextlib.suppress(Exception):
            self._transport.close()
        error = (
            reason
            if isinstance(reason, ConnectionClosed)
            else ConnectionClosed(f"connection to {self.address} lost: {reason!r}")
        )
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for current_task in self._tasks:
            if current_task is not asyncio.current_task():
                current_task.cancel()
        handlers: list[ProducerHandler | ConsumerHandler] = [*producers.values(), *consumers.values()]
        for handler in handlers:
            try:
                handler.on_connection_closed(self)
            except Exception:
                log.exception("handler failed on connection close")

    # --- sending ----------------------------------------------------------------------------------
    def new_request_id(self) -> int:
        return next(self._request_ids)

    def send_command(self, command: wire.BaseCommand, payload: bytes | memoryview | None = None) -> None:
        """Queue a frame for writing (no answer expected)."""
        if self._closed.done():
            raise ConnectionClosed(f"connection to {self.address} is closed")
        if payload is not None and len(payload) > 64 * 1024:
            head, body = encode_frame_parts(command, payload)
            self._transport.writelines((head, body))
        else:
            self._transport.write(encode_frame(command, payload))

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        try:
            await self._receiver.drain()
        except (ConnectionError, OSError) as exc:
            self._abort(exc)
            raise ConnectionClosed(f"connection to {self.address} lost: {exc!r}") from None

    async def request(self, body: Any, timeout: float | None = None) -> Any:
        """Send a command whose body has a ``request_id`` and return its answer's body.

        The request id is assigned here. Raises the broker's error as a ServerError,
        ``Timeout`` after ``timeout`` (default: the operation timeout), ``ConnectionClosed``
        if the connection goes first.
        """
        if self._closed.done():
            raise ConnectionClosed(f"connection to {self.address} is closed")
        request_id = self.new_request_id()
        body.request_id = request_id
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self.send_command(commands.wrap(body))
            async with asyncio.timeout(timeout or self.operation_timeout):
                return await future
        except TimeoutError:
            raise Timeout(f"no answer from {self.address} to {type(body).__name__} in time") from None
        finally:
            self._pending.pop(request_id, None)

    # --- registration -----------------------------------------------------------------------------
    def register_producer(self, producer_id: int, handler: ProducerHandler) -> None:
        self._producers[producer_id] = handler

    def remove_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def register_consumer(self, consumer_id: int, handler: ConsumerHandler) -> None:
        self._consumers[consumer_id] = handler

    def remove_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    # --- receiving --------------------------------------------------------------------------------
    def _frames_received(self) -> None:
        """A read came: dispatch every complete frame (the decoder's shared buffer needs them
        all out before the loop's next read)."""
        self._last_received = time.monotonic()
        decoder = self._decoder
        try:
            while not self._closed.done() and (frame := _plain(decoder.next_frame())) is not None:
                self._dispatch(frame)
        except ProtocolError as exc:
            log.warning("protocol error from %s: %s", self.address, exc)
            self._abort(exc)
        except (ConnectionError, OSError) as exc:
            self._abort(exc)
        except Exception as exc:
            log.exception("unexpected error reading from %s", self.address)
            self._abort(exc)

    def _connection_lost(self, exc: BaseException | None) -> None:
        self._abort(exc if exc is not None else ConnectionClosed(f"{self.address} closed the connection"))

    async def _keepalive_loop(self) -> None:
        while not self._closed.done():
            await asyncio.sleep(self.keepalive_interval)
            if time.monotonic() - self._last_received > self.keepalive_interval * 2:
                log.warning("%s silent for %.0fs, closing", self.address, 2 * self.keepalive_interval)
                self._abort(ConnectionClosed(f"{self.address} stopped answering pings"))
                return
            with contextlib.suppress(ConnectionClosed):
                self.send_command(commands.ping())

    def _dispatch(self, frame: Frame) -> None:
        kind = frame.type
        body = frame.body()
        if kind in _RESPONSES:
            self._complete(frame, body)
        elif kind == T.MESSAGE:
            handler = self._consumers.get(body.consumer_id)
            if handler is not None:
                handler.on_message(
                    self, body, frame.payload if frame.payload is not None else memoryview(b"")
                )
        elif kind == T.SEND_RECEIPT:
            producer = self._producers.get(body.producer_id)
            if producer is not None:
                producer.on_send_receipt(self, body)
        elif kind == T.SEND_ERROR:
            producer = self._producers.get(body.producer_id)
            if producer is not None:
                producer.on_send_error(self, body)
        elif kind == T.AUTH_CHALLENGE:
            self._answer_auth_challenge()
        elif kind == T.PING:
            self.send_command(commands.pong())
        elif kind == T.PONG:
            pass
        elif kind == T.CLOSE_PRODUCER:
            producer = self._producers.pop(body.producer_id, None)
            if producer is not None:
                producer.on_close_by_broker(self)
        elif kind == T.CLOSE_CONSUMER:
            consumer = self._consumers.pop(body.consumer_id, None)
            if consumer is not None:
                consumer.on_close_by_broker(self)
        elif kind == T.ACTIVE_CONSUMER_CHANGE:
            consumer = self._consumers.get(body.consumer_id)
            if consumer is not None:
                consumer.on_active_consumer_change(self, body.is_active)
        elif kind == T.REACHED_END_OF_TOPIC:
            consumer = self._consumers.get(body.consumer_id)
            if consumer is not None:
                consumer.on_reached_end_of_topic(self)
        else:
            log.debug("ignoring %s from %s", frame.type_name, self.address)

    def _answer_auth_challenge(self) -> None:
        """The broker asks for fresh credentials (its check found ours expired): answer with
        ``auth_data()`` again; without credentials to give, the connection cannot go on."""
        if self.authentication is None:
            self._abort(ConnectError(f"{self.address} asked for credentials and we have none"))
            return
        try:
            data = self.authentication.auth_data()
        except Exception as exc:
            log.warning("the token supplier failed, closing %s: %r", self.address, exc)
            self._abort(ConnectError(f"cannot refresh credentials: {exc!r}"))
            return
        response = wire.CommandAuthResponse(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        response.response.auth_method_name = self.authentication.auth_method_name
        response.response.auth_data = data
        with contextlib.suppress(ConnectionClosed):
            self.send_command(commands.wrap(response))

    def _complete(self, frame: Frame, body: Any) -> None:
        if frame.type == T.PRODUCER_SUCCESS and not body.producer_ready:
            return  # queued for exclusive access; the real answer comes later
        future = self._pending.get(body.request_id)
        if future is None or future.done():
            return
        error = _response_error(frame)
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(body)

    def __repr__(self) -> str:
        state = "closed" if self._closed.done() else "open"
        return f"<Connection {self.address} {state}>"


async def _open_transport(
    receiver: ReceiveProtocol, host: str, port: int, ssl_context: ssl.SSLContext | None, timeout: float
) -> asyncio.Transport:
    """The TCP (or TLS, with ``ssl_context``) connection ``receiver`` reads, opened in ``timeout``."""
    try:
        async with asyncio.timeout(timeout):
            transport, _ = await asyncio.get_running_loop().create_connection(
                lambda: receiver,
                host,
                port,
                ssl=ssl_context,
                server_hostname=host if ssl_context is not None else None,
            )
    except ssl.SSLError as exc:
        raise TlsError(f"TLS handshake with {host}:{port} failed: {_tls_reason(exc)}") from None
    except (TimeoutError, OSError) as exc:
        raise ConnectError(f"cannot connect to {host}:{port}: {exc!r}") from None
    return transport


def _plain(frame: Frame | HotAck | HotMessage | None) -> Frame | None:
    """The client's decoder is made without hot acks or hot messages: every frame is a Frame."""
    if frame is None or isinstance(frame, Frame):
        return frame
    raise ProtocolError(f"unexpected {type(frame).__name__} from a decoder without hot frames")
