"""One in-process Pulsar session: a ``ServerCnx`` of the broker fed through a ``LocalTransport``.

The WebSocket handlers and the REST produce API speak to the broker as a client would, in
commands (CONNECT with the HTTP client's credentials, PRODUCER, SEND, SUBSCRIBE, FLOW, ACK ...),
and the broker serves them with the same code as its Pulsar port: authentication, authorization,
limits, quotas, schemas, deduplication, flow control, receipts only once an entry is on disk.
No socket, no lookup and no client library stand between: frames go from memory to the
connection's decoder and back.

Answers to requests complete futures by request id; receipts go to the producer, messages to the
consumer they name (``local_producer.py``, ``local_consumer.py``). The session answers the
broker's PING and AUTH_CHALLENGE itself. When the connection ends (the broker closed it, or the
session did) every pending request fails and every producer and consumer hears it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from magnetar import __version__
from magnetar.broker.connection import ServerCnx
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.commands import pong, wrap
from magnetar.protocol.frames import Frame, FrameDecoder, encode_frame
from magnetar.protocol.hot_acks import HotMessage
from magnetar.websocket.local_transport import LocalTransport

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

T = wire.BaseCommand
#: What the broker's admin API shows as these connections' client version.
CLIENT_VERSION = f"magnetar-websocket-{__version__}"
PROTOCOL_VERSION = 21
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
    HTTPS its certificate (the ``tls`` provider)."""

    token: str | None = None
    over_tls: bool = False


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


class LocalSession:
    """Open with ``await LocalSession.open(service, credentials, extra)``; ``close()`` when done."""

    def __init__(self, service: BrokerService, extra: dict[str, Any]) -> None:
        self.service = service
        self.cnx = ServerCnx(service)
        self._decoder = FrameDecoder(_MAX_FRAME, hot_messages=True)
        self.transport = LocalTransport(self.cnx, self._received, self._lost, extra)
        self._request_ids = itertools.count()
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._producers: dict[int, ProducerEnd] = {}
        self._consumers: dict[int, ConsumerEnd] = {}
        self._scheduled = False
        self._credentials = Credentials()
        self.closed = False
        #: Why the session ended (the broker's ERROR, or a close), once it has.
        self.close_reason = ""
        #: Called once when the session ends, whoever ended it.
        self.on_closed: Callable[[str], None] = lambda reason: None

    @classmethod
    async def open(
        cls, service: BrokerService, credentials: Credentials, extra: dict[str, Any]
    ) -> LocalSession:
        """Connected and authenticated, or SessionError (AuthenticationError ...)."""
        session = cls(service, extra)
        session._credentials = credentials
        session.cnx.connection_made(session.transport)
        connect = wire.CommandConnect(client_version=CLIENT_VERSION, protocol_version=PROTOCOL_VERSION)
        if credentials.token is not None:
            connect.auth_method_name = "token"
            connect.auth_data = credentials.token.encode()
        elif credentials.over_tls:
            connect.auth_method_name = "tls"
        waiter = session._expect(0)  # CONNECTED, or the refusal (an ERROR)
        session.send(wrap(connect))
        try:
            await waiter
        except SessionError:
            session.close()
            raise
        return session

    def new_id(self) -> int:
        """A producer or consumer id on this session."""
        return next(self._ids)

    def new_request_id(self) -> int:
        return next(self._request_ids) + 1  # 0 is CONNECT's

    # -- out -----------------------------------------------------------------------------------
    def send(self, command: wire.BaseCommand, payload: bytes | memoryview | None = None) -> None:
        if self.closed:
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
        await self.transport.readable.wait()

    def add_producer(self, producer_id: int, end: ProducerEnd) -> None:
        self._producers[producer_id] = end

    def add_consumer(self, consumer_id: int, end: ConsumerEnd) -> None:
        self._consumers[consumer_id] = end

    def remove_consumer(self, consumer_id: int) -> None:
        self._consumers.pop(consumer_id, None)

    def close(self) -> None:
        """End the session: the broker drops its producers and consumers (as for a lost connection)."""
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
        token = self._credentials.token
        response.response.auth_method_name = "token" if token is not None else "tls"
        response.response.auth_data = (token or "").encode()
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
        self._end(self.close_reason or "the session is closed")

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
