"""``/ws/v2/consumer/{domain}/{tenant}/{namespace}/{topic}/{subscription}`` and
``/ws/v2/reader/{domain}/{tenant}/{namespace}/{topic}``: Pulsar's WebSocket consumer and reader
(its ``ConsumerHandler`` and ``ReaderHandler``).

Messages are pushed as ``ConsumerMessage`` JSON. The client answers with acks
(``{"messageId": ...}``), negative acks (``"type": "negativeAcknowledge"``), ``permit`` (pull
mode), ``unsubscribe`` and ``isEndOfTopic`` (answered ``{"endOfTopic": true|false}``). In push mode
at most ``receiverQueueSize`` messages are out unacknowledged; in pull mode (``pullMode=true``)
only as many as the client permitted. A reader's acks only count its messages out. A command that
is not JSON closes the session with Pulsar's error 3 (close code 4003), as Pulsar does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING

from aiohttp import WSMsgType, web

from magnetar.protocol import wire
from magnetar.websocket.http_session import partitions_of, refusal, refused, sessions_for, topic_of
from magnetar.websocket.json_shapes import (
    BadInput,
    WebSocketError,
    consumer_message,
    decode_message_id,
    end_of_topic,
    parse_consumer_command,
)
from magnetar.websocket.local_consumer import ConsumerOptions, LocalConsumer, earliest, latest
from magnetar.websocket.session import SessionError
from magnetar.websocket.ws_common import Outbox, QueryParams, close_with, invalid, upgrade

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.websocket.sessions import Sessions

log = logging.getLogger(__name__)

#: Pulsar caps ``receiverQueueSize`` of its WebSocket consumers and readers at 1000.
MAX_RECEIVER_QUEUE = 1000
_TYPES = {
    "Exclusive": wire.CommandSubscribe.Exclusive,
    "Shared": wire.CommandSubscribe.Shared,
    "Failover": wire.CommandSubscribe.Failover,
    "Key_Shared": wire.CommandSubscribe.Key_Shared,
}
#: The Java client's smallest ack timeout (a smaller one is refused, as ``ConsumerBuilder`` does).
MIN_ACK_TIMEOUT_MS = 1000


class Gate:
    """How many more messages may go to the client: push mode, ``limit`` out unacknowledged; pull
    mode, the permits the client gave."""

    def __init__(self, pull: bool, limit: int) -> None:
        self.pull = pull
        self.room = 0 if pull else limit
        self._open = asyncio.Event()
        if self.room > 0:
            self._open.set()

    async def take(self) -> None:
        while self.room <= 0:
            self._open.clear()
            await self._open.wait()
        self.room -= 1

    def give(self, count: int) -> None:
        self.room += count
        if self.room > 0:
            self._open.set()

    def answered(self) -> None:
        """An ack or negative ack came back: in push mode one more may go."""
        if not self.pull:
            self.give(1)


def consumer_handler(service: BrokerService, domain: str):
    async def consume(request: web.Request) -> web.StreamResponse:
        topic = topic_of(request, domain)
        subscription = request.match_info["subscription"]
        if not subscription:
            raise invalid("Empty subscription name")
        params = QueryParams(request)
        for unsupported in ("maxRedeliverCount", "deadLetterTopic"):
            if params.text(unsupported) is not None:
                raise invalid(f"{unsupported}: dead letter topics are not supported here (docs/websocket.md)")
        kind = params.choice("subscriptionType", tuple(_TYPES), "Exclusive")
        ack_timeout = params.integer("ackTimeoutMillis", 0)
        if 0 < ack_timeout < MIN_ACK_TIMEOUT_MS:
            raise invalid(f"Ack timeout should be greater than {MIN_ACK_TIMEOUT_MS} ms")
        queue = min(params.integer("receiverQueueSize", MAX_RECEIVER_QUEUE), MAX_RECEIVER_QUEUE)
        pull = params.boolean("pullMode")
        options = ConsumerOptions(
            subscription_type=_TYPES[kind],
            consumer_name=params.text("consumerName"),
            receiver_queue_size=queue,
            ack_timeout_ms=ack_timeout,
            negative_ack_redelivery_delay_ms=params.integer("negativeAckRedeliveryDelay", 60_000),
            priority_level=params.integer("priorityLevel", 0),
        )
        sessions, consumer = await _subscribe(service, request, topic, subscription, options, "subscribe")
        log.info(
            "%s: WebSocket consumer on %s, subscription %s (%s)", request.remote, topic, subscription, kind
        )
        return await _serve(request, service, sessions, consumer, Gate(pull, queue or 1), reader=False)

    return consume


def reader_handler(service: BrokerService, domain: str):
    async def read(request: web.Request) -> web.StreamResponse:
        topic = topic_of(request, domain)
        params = QueryParams(request)
        queue = min(params.integer("receiverQueueSize", MAX_RECEIVER_QUEUE), MAX_RECEIVER_QUEUE)
        start = params.text("messageId") or "latest"
        if start == "earliest":
            start_id = earliest()
        elif start == "latest":
            start_id = latest()
        else:
            try:
                start_id = decode_message_id(start)
            except ValueError as exc:
                raise invalid(str(exc)) from None
        options = ConsumerOptions(
            consumer_name=params.text("readerName"),
            receiver_queue_size=queue,
            reader=True,
            start_message_id=start_id,
        )
        subscription = LocalConsumer.reader_subscription()
        sessions, consumer = await _subscribe(service, request, topic, subscription, options, "create reader")
        log.info("%s: WebSocket reader on %s from %s", request.remote, topic, start)
        return await _serve(request, service, sessions, consumer, Gate(False, queue or 1), reader=True)

    return read


async def _subscribe(
    service: BrokerService,
    request: web.Request,
    topic,
    subscription: str,
    options: ConsumerOptions,
    what: str,
) -> tuple[Sessions, LocalConsumer]:
    topics = partitions_of(service, topic)
    if options.reader and len(topics) > 1 and options.start_message_id is not None:
        start = options.start_message_id
        if start.ledger_id not in (earliest().ledger_id, latest().ledger_id):
            raise refusal(
                400, "Invalid query params: a reader of a partitioned topic starts at earliest or latest"
            )
    sessions = sessions_for(service, request, query_token=True)
    try:
        consumer = await LocalConsumer.subscribe(sessions, topics, subscription, options)
    except SessionError as exc:
        sessions.close()
        raise refused(exc, what) from None
    return sessions, consumer


async def _serve(
    request: web.Request,
    service: BrokerService,
    sessions: Sessions,
    consumer: LocalConsumer,
    gate: Gate,
    reader: bool,
) -> web.StreamResponse:
    try:
        ws = await upgrade(request, service.config)
    except BaseException:
        sessions.close()
        raise
    outbox = Outbox(ws)
    ended: list[str] = []

    def gone(reason: str) -> None:
        ended.append(reason)
        gate.give(1)  # wake the sender, which sees the end

    consumer.on_closed = gone
    sender = asyncio.get_running_loop().create_task(_send(ws, consumer, gate, ended))
    try:
        async for frame in ws:
            if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                break
            try:
                command = parse_consumer_command(frame.data)
            except BadInput as exc:
                if reader and _is_json(frame.data):  # a reader's "ack" is any JSON: it is only counted
                    gate.answered()
                    continue
                await close_with(ws, exc.error, str(exc))
                break
            if not await _handle(command, ws, outbox, consumer, gate, reader):
                break
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        await outbox.close()
        consumer.close()
        sessions.close()
    return ws


def _is_json(data: str | bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


async def _handle(command, ws, outbox: Outbox, consumer: LocalConsumer, gate: Gate, reader: bool) -> bool:
    """Carry out one command; False once the session is to end."""
    kind = command.type
    if kind == "isEndOfTopic":
        outbox.put(end_of_topic(consumer.reached_end_of_topic))
    elif kind == "permit":
        if gate.pull:
            gate.give(command.permit_messages)
    elif kind == "unsubscribe":
        if reader:
            return True
        try:
            await consumer.unsubscribe()
        except SessionError as exc:
            await close_with(ws, WebSocketError.UnknownError, f"unsubscribe failed: {exc}")
            return False
        await outbox.drain()
        await ws.close(code=1000, message=b"unsubscribed")
        return False
    elif kind == "negativeAcknowledge":
        consumer.negative_acknowledge(command.message_id)
        gate.answered()
    else:
        consumer.acknowledge(command.message_id)
        gate.answered()
    return True


async def _send(ws: web.WebSocketResponse, consumer: LocalConsumer, gate: Gate, ended: list[str]) -> None:
    """Push messages as the gate allows; ends when the consumer or the socket does. A consumer the
    broker ended (and that could not subscribe again) closes the socket with the reason."""
    try:
        while not ws.closed and not consumer.closed:
            await gate.take()
            if consumer.closed:
                break
            message = await consumer.receive()
            await ws.send_str(consumer_message(message))
    except (SessionError, ConnectionError, RuntimeError):
        pass
    if ended and not ws.closed:
        await close_with(ws, WebSocketError.FailedToSubscribe, ended[0])
