"""``/ws/v2/producer/{persistent|non-persistent}/{tenant}/{namespace}/{topic}``: Pulsar's WebSocket
producer (its ``ProducerHandler``).

Each text frame is a ``ProducerMessage`` (``payload`` base64, ``properties``, ``context``, ``key``,
``replicationClusters``, ``eventTime``, ``sequenceId``, ``deliverAt``, ``deliverAfterMs``,
``disableReplication``); each is answered ``{"result": "ok", "messageId": ..., "context": ...}``
once the broker has the entry on disk, or ``{"result": "send-error:N", "errorMsg": ...}``. A
partitioned topic's messages go to the partition of their key (``hashingScheme``, Java's
``JavaStringHash`` by default, as Pulsar's service runs the Java client), else to one partition
chosen at random (``messageRoutingMode=SinglePartition``, Pulsar's WebSocket default) or to each
in turn (``RoundRobinPartition``). Messages go one entry each unless ``batchingEnabled=true``
(``batcher.py``: ``batchingMaxMessages``, ``batchingMaxPublishDelay``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from typing import TYPE_CHECKING, Protocol

from aiohttp import WSMsgType, web

from magnetar.protocol.compression import CompressionType
from magnetar.protocol.key_hash import HashingScheme, key_partition
from magnetar.websocket.batcher import DEFAULT_MAX_DELAY_MS, DEFAULT_MAX_MESSAGES, Batcher
from magnetar.websocket.http_session import partitions_of, refused, sessions_for, topic_of
from magnetar.websocket.json_shapes import (
    BadInput,
    OutgoingMessage,
    WebSocketError,
    parse_producer_message,
    producer_ack,
    producer_error,
)
from magnetar.websocket.local_producer import LocalProducer
from magnetar.websocket.session import SessionError
from magnetar.websocket.ws_common import Outbox, QueryParams, close_with, upgrade

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol import wire

log = logging.getLogger(__name__)

_ROUTING = ("SinglePartition", "RoundRobinPartition", "CustomPartition")
_HASHING = ("JavaStringHash", "Murmur3_32Hash")
_COMPRESSION = tuple(kind.name for kind in CompressionType)


class Router:
    """Which partition's producer takes a message."""

    def __init__(self, producers: list[LocalProducer], routing: str, hashing: HashingScheme) -> None:
        self.producers = producers
        self._round_robin = routing == "RoundRobinPartition"
        self._hashing = hashing
        self._next = random.randrange(len(producers))

    def producer_for(self, message: OutgoingMessage) -> LocalProducer:
        count = len(self.producers)
        if count == 1:
            return self.producers[0]
        if message.key is not None:
            return self.producers[key_partition(message.key, count, self._hashing)]
        index = self._next
        if self._round_robin:
            self._next = (index + 1) % count
        return self.producers[index]


def handler(service: BrokerService, domain: str):
    async def produce(request: web.Request) -> web.StreamResponse:
        topic = topic_of(request, domain)
        params = QueryParams(request)
        name = params.text("producerName")
        initial = params.integer("initialSequenceId", -1, minimum=-1)
        routing = params.choice("messageRoutingMode", _ROUTING, "SinglePartition")
        hashing = HashingScheme[params.choice("hashingScheme", _HASHING, "JavaStringHash")]
        compression = CompressionType[params.choice("compressionType", _COMPRESSION, "NONE")]
        max_pending = params.integer("maxPendingMessages", 1000, minimum=1)
        batching = params.boolean("batchingEnabled")
        batch_messages = params.integer("batchingMaxMessages", DEFAULT_MAX_MESSAGES, minimum=1)
        batch_delay_ms = params.integer("batchingMaxPublishDelay", DEFAULT_MAX_DELAY_MS)
        sessions = sessions_for(service, request, query_token=True)
        try:
            producers = [
                await LocalProducer.create(
                    await sessions.for_topic(partition),
                    partition,
                    name,
                    initial_sequence_id=None if initial < 0 else initial,
                    compression=compression,
                    sessions=sessions,
                )
                for partition in partitions_of(service, topic)
            ]
        except SessionError as exc:
            sessions.close()
            raise refused(exc, "create producer") from None
        log.info("%s: WebSocket producer %s on %s", request.remote, producers[0].name, topic)
        try:
            ws = await upgrade(request, service.config)
            senders: dict[LocalProducer, Sender] = {
                p: Batcher(p, batch_messages, batch_delay_ms / 1000) if batching else p for p in producers
            }
            await _serve(ws, Router(producers, routing, hashing), senders, max_pending)
        finally:
            for producer in producers:
                producer.close()
            sessions.close()
        return ws

    return produce


class Sender(Protocol):
    """Where a partition's messages go: its producer, or the batcher in front of it."""

    def send(self, message: OutgoingMessage) -> asyncio.Future[wire.MessageIdData]: ...


async def _serve(
    ws: web.WebSocketResponse, router: Router, senders: dict[LocalProducer, Sender], max_pending: int
) -> None:
    outbox = Outbox(ws)
    pending = 0
    closing: list[asyncio.Task[None]] = []

    def gone(reason: str) -> None:
        """A producer's topic could not be reached again (``reconnect.py``), or the broker refused
        it there: the client is told and starts again."""
        if not closing:
            closing.append(asyncio.ensure_future(_close_after(outbox, ws, reason)))

    for producer in router.producers:
        producer.on_gone = gone
    room = asyncio.Event()
    room.set()

    def answered(context: str | None, future: asyncio.Future[wire.MessageIdData]) -> None:
        nonlocal pending
        pending -= 1
        room.set()
        if future.cancelled():
            return
        if (exc := future.exception()) is not None:
            outbox.put(producer_error(WebSocketError.UnknownError, str(exc), context))
        else:
            outbox.put(producer_ack(future.result(), context))

    try:
        async for frame in ws:
            if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                break
            try:
                message = parse_producer_message(frame.data)
            except BadInput as exc:
                outbox.put(producer_error(exc.error, str(exc), exc.context))
                continue
            producer = router.producer_for(message)
            if producer.closed:  # the broker closed it: the session is being closed
                reason = producer.closed_reason
                outbox.put(producer_error(WebSocketError.UnknownError, reason, message.context))
                continue
            future = senders[producer].send(message)
            pending += 1
            future.add_done_callback(functools.partial(answered, message.context))
            # Flow control: not read while the broker does not read this session (its holds) or
            # too many sends await their receipts; TCP then holds the WebSocket client back.
            while pending >= max_pending:
                room.clear()
                await room.wait()
            await producer.session.writable()
    finally:
        for sender in senders.values():  # what is gathered is sent, as a closing Java producer does
            if isinstance(sender, Batcher):
                sender.flush()
        for producer in router.producers:  # the session ends next: nothing more to tell the client
            producer.on_gone = _ignore
        if closing:
            await closing[0]
        elif not ws.closed:
            await outbox.drain()
        await outbox.close()


def _ignore(reason: str) -> None:
    pass


async def _close_after(outbox: Outbox, ws: web.WebSocketResponse, reason: str) -> None:
    """Answer what is queued (the failed sends' errors), then close with the reason."""
    await asyncio.sleep(0)  # the failed sends' answers are queued on this turn
    await outbox.drain()
    await close_with(ws, WebSocketError.FailedToCreateProducer, reason)
