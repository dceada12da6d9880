"""One Pulsar session for an HTTP client: a ``ServerCnx`` of the broker fed in-process through a
``LocalTransport``, or, for a topic another worker owns (``--workers``), a Pulsar connection to
that worker's own port (``OwnerLink``).

The WebSocket handlers and the REST produce API speak to the broker as a client would, in
commands (CONNECT with the HTTP client's credentials, PRODUCER, SEND, SUBSCRIBE, FLOW, ACK ...),
and the broker serves them with the same code as its Pulsar port: authentication, authorization,
limits, quotas, schemas, deduplication, flow control, receipts only once an entry is on disk.
In-process, no socket, no lookup and no client library stand between: frames go from memory to
the connection's decoder and back. To another worker, the same frames go over a socket, and the
client's credentials are sealed with the workers' secret (``broker/worker_credentials.py``) so
that the owner checks them itself.

Answers to requests complete futures by request id; receipts go to the producer, messages to the
consumer they name (``local_producer.py``, ``local_consumer.py``). The session answers the
broker's PING and AUTH_CHALLENGE itself. When the connection ends (the broker closed it, or the
session did) every pending request fails and every producer and consumer hears it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from magnetar import __version__
from magnetar.broker.connection import ServerCnx
from magnetar.broker.tls_identity import AUTH_METHOD_NAME as TLS_METHOD
from magnetar.broker.worker_credentials import AUTH_METHOD as WORKER_METHOD
from magnetar.broker.worker_credentials import Relayed
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.commands import pong, wrap
from magnetar.protocol.frames import Frame, FrameDecoder, encode_frame
from magnetar.protocol.hot_acks import HotMessage
from magnetar.websocket.local_transport import LocalTransport

if TYPE_CHECKING:
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService
    from magnetar.broker.worker_credentials import WorkerSecret

log = logging.getLogger(__name__)

T = wire.BaseCommand
#: What the broker's admin API shows as these connections' client version.
CLIENT_VERSION = f"magnetar-websocket-{__version__}"
PROTOCOL_VERSION = 21
#: How long another worker may take to answer a session's CONNECT (it is restarting ...).
OWNER_CONNECT_TIMEOUT_S = 30.0
#: Frames the broker sends us are never refused for size (the broker sizes them).
_MAX_FRAME = 1 << 31

_RESPONSES = {
    T.SUCCESS,
    T.ERROR,
    T.PRODUCER_SUCCESS,
    T.GET_LAST_MESSAGE_ID_RESPONSE,
    T.ACK_RESPONSE,
}


class SessionError(Exception):
    """A request refused by the broker (``code``: its ``ServerError``), or the session ended."""

    def __init__(self, message: str, code: int = wire.UnknownError) -> None:
        super().__init__(message)
        self.code = code


class SessionClosed(SessionError):
    """The broker's connection is gone."""

    def __init__(self, message: str = "the broker closed the session") -> None:
        super().__init__(message, wire.ServiceNotReady)


@dataclass(frozen=True, slots=True)
class Credentials:
    """What the HTTP client proved itself with, presented again at CONNECT: a token (the
    ``Authorization: Bearer`` header, or the WebSocket API's ``token`` query parameter), or over
    HTTPS its certificate (the ``tls`` provider; ``certificate``: its verified fields, which a
    session to another worker passes on sealed)."""

    token: str | None = None
    over_tls: bool = False
    certificate: dict[str, Any] | None = None


class ProducerEnd(Protocol):
    def on_receipt(self, receipt: wire.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: wire.CommandSendError) -> None: ...
    def on_closed(self, reason: str) -> None: ...


class ConsumerEnd(Protocol):
    def on_message(
        self, command: wire.CommandMessage | None, hot: HotMessage | None, payload: memoryview
    ) -> None: ...
    def on_end_of_topic(self) -> None: ...
    def on_closed(self, reason: str) -> None: ...


class Link(Protocol):
    """Where a session's frames go: the in-process transport, or a socket to another worker."""

    #: Set while the broker takes bytes (its flow control, or the socket's, holds them otherwise).
    readable: asyncio.Event

    def push(self, data: bytes) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


class OwnerLink(asyncio.Protocol):
    """A session's Pulsar connection to the worker that owns its topics."""

    def __init__(self, deliver: Callable[[list[bytes | memoryview]], None], lost: Callable[[], None]) -> None:
        self._deliver = deliver
        self._lost = lost
        self._transport: asyncio.Transport | None = None
        self.readable = asyncio.Event()
        self.readable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._deliver([data])

    def connection_lost(self, exc: Exception | None) -> None:
        self.readable.set()
        self._lost()

    def pause_writing(self) -> None:
        self.readable.clear()

    def resume_writing(self) -> None:
        self.readable.set()

    def push(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def flush(self) -> None:
        pass  # written at once

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class LocalSession:
    """Open with ``await LocalSession.open(service, credentials, extra)`` (in-process) or
    ``await LocalSession.to_owner(...)``; ``close()`` when done."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._decoder = FrameDecoder(_MAX_FRAME, hot_messages=True)
        self.transport: Link | None = None
        self._request_ids = itertools.count()
        self._ids: Iterator[int] = itertools.count()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._producers: dict[int, ProducerEnd] = {}
        self._consumers: dict[int, ConsumerEnd] = {}
        self._scheduled = False
        self._auth: tuple[str, Callable[[], bytes]] | None = None
        self.closed = False
        #: Why the session ended (the broker's ERROR, or a close), once it has.
        self.close_reason = ""
        #: What ends the session when its connection does (the owner's connection, for another worker's).
        self._lost_reason = "the session is closed"
        #: Called once when the session ends, whoever ended it.
        self.on_closed: Callable[[str], None] = lambda reason: None

    @classmethod
    async def open(
        cls, service: BrokerService, credentials: Credentials, extra: dict[str, Any]
    ) -> LocalSession:
        """In-process: connected and authenticated, or SessionError (AuthenticationError ...)."""
        session = cls(service)
        cnx = ServerCnx(service)
        session.transport = transport = LocalTransport(cnx, session._received, session._lost, extra)
        cnx.connection_made(transport)
        if credentials.token is not None:
            token = credentials.token.encode()
            session._auth = ("token", lambda: token)
        elif credentials.over_tls:
            session._auth = (TLS_METHOD, lambda: b"")
        await session._connect()
        return session

    @classmethod
    async def to_owner(
        cls,
        service: BrokerService,
        owner: BrokerInfo,
        credentials: Credentials,
        secret: WorkerSecret,
        relayed: Relayed | None = None,
    ) -> LocalSession:
        """To ``owner``'s own Pulsar port, with the client's credentials sealed (when
        authentication is on; ``relayed``: these instead, a worker's own identity): connected and
        authenticated by the owner, or SessionError."""
        session = cls(service)
        host, port, context = _address(owner)
        try:
            _, link = await asyncio.get_running_loop().create_connection(
                lambda: OwnerLink(session._received, session._lost), host, port, ssl=context
            )
        except OSError as exc:
            raise SessionError(f"{owner.broker_id} cannot be reached: {exc}", wire.ServiceNotReady) from None
        session.transport = link
        session._lost_reason = f"the connection to {owner.broker_id}, which owns the topic, ended"
        if service.authentication is not None:
            sealed = _relayed(credentials) if relayed is None else relayed
            session._auth = (WORKER_METHOD, lambda: secret.seal(sealed))
        try:
            await asyncio.wait_for(session._connect(), OWNER_CONNECT_TIMEOUT_S)
        except TimeoutError:
            session.close()
            raise SessionError(f"{owner.broker_id} did not answer CONNECT", wire.ServiceNotReady) from None
        return session

    async def _connect(self) -> None:
        connect = wire.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        if self._auth is not None:
            method, data = self._auth
            connect.auth_method_name = method
            connect.auth_data = data()
        waiter = self._expect(0)  # CONNECTED, or the refusal (an ERROR)
        self.send(wrap(connect))
        try:
            await waiter
        except SessionError:
            self.close()
            raise

    def new_id(self) -> int:
        """A producer or consumer id on this session."""
        return next(self._ids)

    def share_ids(self, ids: Iterator[int]) -> None:
        """Take producer and consumer ids from ``ids``, shared with other sessions, so that an id
        names one producer or consumer among all of them (a consumer over several sessions)."""
        self._ids = ids

    def new_request_id(self) -> int:
        return next(self._request_ids) + 1  # 0 is CONNECT's

    # -- out -----------------------------------------------------------------------------------
    def send(self, command: wire.BaseCommand, payload: bytes | memoryview | None = None) -> None:
        if self.closed or self.transport is None:
            raise SessionClosed(self.close_reason or "the session is closed")
        self.transport.push(encode_frame(command, payload))

    async def request(self, command: wire.BaseCommand, request_id: int) -> Any:
        """Send ``command`` and wait for its answer (SessionError for an ERROR)."""
        waiter = self._expect(request_id)
        self.send(command)
        return await waiter

    def _expect(self, request_id: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return future

    async def writable(self) -> None:
        """Wait while the broker does not read this session (its flow control holds it)."""
        if self.transport is not None:
            await self.transport.readable.wait()

    def add_producer(self, producer_id: int, end: ProducerEnd) -> None:
        self._producers[producer_id] = end

    def remove_producer(self, producer_id: int) -> None:
        self._producers.pop(producer_id, None)

    def add_consumer(self, consumer_id: int, end: ConsumerEnd) -> None:
        self._consumers[consumer_id] = end

    def remove_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    def close(self) -> None:
        """End the session: the broker drops its producers and consumers (as for a lost connection),
        after what was sent last."""
        if self.transport is not None:
            self.transport.flush()
            self.transport.close()

    # -- in ------------------------------------------------------------------------------------
    def _received(self, frames: list[bytes | memoryview]) -> None:
        decoder = self._decoder
        for data in frames:
            decoder.feed(data)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._dispatch_all)

    def _dispatch_all(self) -> None:
        self._scheduled = False
        try:
            while (frame := self._decoder.next_frame()) is not None:
                if isinstance(frame, HotMessage):
                    consumer = self._consumers.get(frame.consumer_id)
                    if consumer is not None:
                        consumer.on_message(None, frame, frame.payload)
                elif isinstance(frame, Frame):
                    self._dispatch(frame)
        except ProtocolError as exc:  # cannot happen with the broker's own frames; stop cleanly if it does
            log.error("in-process session: the broker's frames do not decode: %s", exc)
            self._end(f"protocol error: {exc}")
            self.close()

    def _dispatch(self, frame: Frame) -> None:
        kind = frame.type
        body = frame.body()
        if kind == T.CONNECTED:
            self._complete(0, body, None)
        elif kind in _RESPONSES:
            failed = kind == T.ERROR or (kind == T.ACK_RESPONSE and body.HasField("error"))
            error = SessionError(body.message, body.error) if failed else None
            if kind == T.ERROR and body.request_id not in self._pending:
                # For the whole connection (a refused CONNECT answers request id -1): the end.
                self._complete(0, body, error)
                self._end(body.message)
            else:
                self._complete(body.request_id, body, error)
        elif kind == T.MESSAGE:
            consumer = self._consumers.get(body.consumer_id)
            if consumer is not None:
                consumer.on_message(
                    body, None, frame.payload if frame.payload is not None else memoryview(b"")
                )
        elif kind == T.SEND_RECEIPT:
            if (producer := self._producers.get(body.producer_id)) is not None:
                producer.on_receipt(body)
        elif kind == T.SEND_ERROR:
            if (producer := self._producers.get(body.producer_id)) is not None:
                producer.on_send_error(body)
        elif kind == T.PING:
            self.send(pong())
        elif kind == T.AUTH_CHALLENGE:
            self._answer_challenge()
        elif kind == T.CLOSE_PRODUCER:
            if (producer := self._producers.pop(body.producer_id, None)) is not None:
                producer.on_closed("the broker closed the producer")
        elif kind == T.CLOSE_CONSUMER:
            if (consumer := self._consumers.pop(body.consumer_id, None)) is not None:
                consumer.on_closed("the broker closed the consumer")
        elif kind == T.REACHED_END_OF_TOPIC and (consumer := self._consumers.get(body.consumer_id)):
            consumer.on_end_of_topic()

    def _answer_challenge(self) -> None:
        """The broker found our credentials expired: they are all we have, so we give them again
        (an expired token is refused, and the broker closes the session, as for any client)."""
        response = wire.CommandAuthResponse(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        method, data = self._auth or ("none", lambda: b"")
        response.response.auth_method_name = method
        response.response.auth_data = data()
        self.send(wrap(response))

    def _complete(self, request_id: int, body: Any, error: SessionError | None) -> None:
        future = self._pending.pop(request_id, None)
        if future is None or future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(body)

    def _lost(self) -> None:
        self._end(self.close_reason or self._lost_reason)

    def _end(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        for future in self._pending.values():
            if not future.done():
                future.set_exception(SessionClosed(reason))
        self._pending.clear()
        producers, self._producers = self._producers, {}
        consumers, self._consumers = self._consumers, {}
        for producer in producers.values():
            producer.on_closed(reason)
        for consumer in consumers.values():
            consumer.on_closed(reason)
        self.on_closed(reason)


def _relayed(credentials: Credentials) -> Relayed:
    if credentials.token is not None:
        return Relayed("token", credentials.token.encode())
    if credentials.over_tls:
        return Relayed(TLS_METHOD, certificate=credentials.certificate)
    return Relayed("none")


def _address(owner: BrokerInfo) -> tuple[str, int, ssl.SSLContext | None]:
    """The owner's own Pulsar port: plain if it has one, else TLS (its certificate is the same
    broker's, on this machine: not verified)."""
    url = owner.service_url or owner.service_url_tls
    if url is None:
        raise SessionError(f"{owner.broker_id} serves no Pulsar port", wire.ServiceNotReady)
    parsed = urlsplit(url)
    context = None
    if parsed.scheme == "pulsar+ssl":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return parsed.hostname or "127.0.0.1", parsed.port or 6650, context
