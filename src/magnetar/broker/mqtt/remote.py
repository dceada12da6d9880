"""Topics another worker owns (``--workers N``), reached by a client's home worker through a
Pulsar session to their owner.

With workers, each MQTT session lives at its client id's home worker (``handoff.py``), and a
topic's bundle may be owned by another. What an MQTT client does on such a topic goes, as Pulsar
commands, over a session from this worker to the owner's own Pulsar port, one per connection and
owner, opened when first needed: its PUBLISHes as a producer's SENDs (named ``mqtt-{client
id}``, deduplicated whatever the namespace says: ``DEDUPLICATED_PROPERTY``), answered from the
owner's SEND_RECEIPT, that is once the message is on the owner's disk; its subscriptions as
consumers of the same Pulsar subscriptions (the session's durable Exclusive one, the group's
Shared one, the broadcast ``mqtt-subscribers``) whose MESSAGEs go out as PUBLISH packets through
the connection's ``Outbound`` and are acknowledged on the owner once the client has them (the
acknowledgement of a QoS 2 message the client PUBREC'd asks the owner to answer once it is on
disk, ``handlers/acks_on_disk.py``, so that the session keeps its key until then). The
owner checks the client's credentials itself (sealed by this worker:
``broker/worker_credentials.py``), as for the WebSocket API. The session itself is made by the
layer above (``BrokerService.owner_sessions``: the WebSocket layer's ``LocalSession.to_owner``),
seen here as ``OwnerSession``."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import BrokerError
from magnetar.broker.handlers import acks_on_disk
from magnetar.broker.handlers.worker_access import ROLE_PROPERTY, away_consumer_name, expiry_consumer_name
from magnetar.broker.mqtt.large_messages import Stored, split
from magnetar.broker.mqtt.outbound import Delivery, MqttConsumer
from magnetar.broker.producer import DEDUPLICATED_PROPERTY
from magnetar.broker.traffic import Traffic
from magnetar.broker.worker_credentials import Relayed, identity
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.headers import parse_metadata
from magnetar.protocol.hot_acks import HotMessage
from magnetar.protocol.message_id import to_u64
from magnetar.protocol.mqtt import ReasonCode
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.broker.mqtt.resends import Held
    from magnetar.broker.mqtt.session import MqttSession
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)
#: A durable subscription's consumer refused as busy is asked for again this often, this many times.
BUSY_RETRY_S = 0.1
BUSY_RETRIES = 50


class OwnerSession(Protocol):
    """A Pulsar session to another worker, as ``websocket/session.py``'s ``LocalSession`` is."""

    closed: bool

    def new_request_id(self) -> int: ...
    def send(self, command: wire.BaseCommand, payload: bytes | memoryview | None = None) -> None: ...
    async def request(self, command: wire.BaseCommand, request_id: int) -> Any: ...
    def add_producer(self, producer_id: int, end: Any) -> None: ...
    def remove_producer(self, producer_id: int) -> None: ...
    def add_consumer(self, consumer_id: int, end: Any) -> None: ...
    def remove_consumer(self, consumer_id: int) -> None: ...
    def close(self) -> None: ...


#: Opens a session to an owner with an MQTT client's credentials (``BrokerService.owner_sessions``).
OwnerSessions = Callable[["BrokerInfo", Relayed], Awaitable[OwnerSession]]


def owner_elsewhere(service: BrokerService, name: TopicName) -> BrokerInfo | None:
    """The worker that owns ``name`` when it is not this one; None when this one serves it."""
    if not service.shares_bundles or service.serves(name):
        return None
    return service.owner_of(name)


async def open_session(service: BrokerService, owner: BrokerInfo, relayed: Relayed) -> OwnerSession:
    factory: OwnerSessions | None = service.owner_sessions
    if factory is None:
        raise BrokerError(f"{owner.broker_id} owns the topic and no session reaches it", wire.ServiceNotReady)
    return await factory(owner, relayed)


#: Producer and consumer ids on shared sessions start here: above any one connection's own ids
#: (``MqttConnection.next_id``), with which they share the connection's books.
FIRST_SHARED_ID = 1 << 40


class OwnerLinks:
    """A worker's sessions to the other workers, shared by its MQTT connections that present the
    same credentials (all of them while authentication is off: one session per owner), each
    closed when the last connection using it is gone. The owner then checks each client's own
    credentials once per session, and its producers and consumers are told apart by ids unique
    over the worker (``new_id``)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._sessions: dict[tuple[str, ...], asyncio.Future[OwnerSession]] = {}
        self._users: dict[tuple[str, ...], int] = {}
        self._ids = itertools.count(FIRST_SHARED_ID)

    def new_id(self) -> int:
        return next(self._ids)

    @staticmethod
    def key(owner: BrokerInfo, relayed: Relayed) -> tuple[str, ...]:
        certificate = json.dumps(relayed.certificate, sort_keys=True, default=str)
        return (owner.broker_id, relayed.method, relayed.data.hex(), certificate)

    def acquire(self, key: tuple[str, ...]) -> None:
        self._users[key] = self._users.get(key, 0) + 1

    def release(self, key: tuple[str, ...]) -> None:
        left = self._users.get(key, 0) - 1
        if left > 0:
            self._users[key] = left
            return
        self._users.pop(key, None)
        future = self._sessions.pop(key, None)
        if future is not None:
            _close_soon(future)

    async def session(self, key: tuple[str, ...], owner: BrokerInfo, relayed: Relayed) -> OwnerSession:
        future = self._sessions.get(key)
        if future is not None and future.done() and (future.exception() or future.result().closed):
            future = None  # it failed or ended (the owner restarted ...): another one
        if future is None:
            future = self._sessions[key] = asyncio.ensure_future(open_session(self.service, owner, relayed))
        return await asyncio.shield(future)

    def close(self) -> None:
        for future in self._sessions.values():
            _close_soon(future)
        self._sessions.clear()
        self._users.clear()


def _close_soon(future: asyncio.Future[OwnerSession]) -> None:
    if future.done() and not future.cancelled() and future.exception() is None:
        future.result().close()
    else:
        future.add_done_callback(_close_when_open)


class Links:
    """A connection's use of the worker's sessions to the workers that own topics it uses
    (``OwnerLinks``), and its producers there."""

    def __init__(self, cnx: MqttConnection) -> None:
        self.cnx = cnx
        self._pool: OwnerLinks = cnx.server.owner_links
        #: The shared sessions this connection uses (their keys).
        self._keys: set[tuple[str, ...]] = set()
        self.producers: dict[str, asyncio.Future[RemoteProducer]] = {}
        #: By topic: the sends its producer there dropped, held to go again first (``resends.py``).
        self.held: dict[str, Held] = {}
        #: (topic, subscription) of the consumers being made (one at a time each).
        self.attaching: set[tuple[str, str]] = set()
        self.closed = False

    def new_id(self) -> int:
        return self._pool.new_id()

    async def session(self, owner: BrokerInfo) -> OwnerSession:
        if self.closed:
            raise BrokerError("the connection is closed", wire.ServiceNotReady)
        key = self._pool.key(owner, self.cnx.relayed)
        if key not in self._keys:
            self._keys.add(key)
            self._pool.acquire(key)
        session = await self._pool.session(key, owner, self.cnx.relayed)
        if self.closed:
            raise BrokerError("the connection is closed", wire.ServiceNotReady)
        return session

    def producer(self, name: TopicName, owner: BrokerInfo) -> asyncio.Future[RemoteProducer]:
        """The connection's producer on ``name`` at its owner (made on the first PUBLISH there)."""
        key = str(name)
        future = self.producers.get(key)
        if future is not None and future.done() and (future.exception() or future.result().closed):
            future = None
        if future is None:
            future = self.producers[key] = asyncio.ensure_future(self._new_producer(name, owner))
        return future

    async def _new_producer(self, name: TopicName, owner: BrokerInfo) -> RemoteProducer:
        cnx = self.cnx
        session_state = cnx.session
        assert session_state is not None
        session = await self.session(owner)
        producer_id, request_id = self.new_id(), session.new_request_id()
        cmd = wire.CommandProducer(
            topic=str(name),
            producer_id=producer_id,
            request_id=request_id,
            producer_name=session_state.producer_name,
            user_provided_producer_name=True,
        )
        cmd.metadata.add(key=DEDUPLICATED_PROPERTY, value="true")
        producer = RemoteProducer(self, session, producer_id, str(name), session_state.producer_name)
        session.add_producer(producer_id, producer)
        try:
            reply = await session.request(wrap(cmd), request_id)
        except BaseException:
            session.remove_producer(producer_id)
            raise
        producer.last_sequence_id = reply.last_sequence_id
        if self.closed:
            producer.close()
        return producer

    def close(self) -> None:
        """The connection is gone: its producers at the owners close (its consumers went first:
        ``subscriptions.drop_all``), and it stops using the shared sessions."""
        self.closed = True
        for future in self.producers.values():
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().close()
        self.producers.clear()
        for key in self._keys:
            self._pool.release(key)
        self._keys.clear()


def _close_when_open(future: asyncio.Future[OwnerSession]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()


class RemoteProducer:
    """An MQTT client's producer on a topic another worker owns: each send is answered, in order,
    by the owner's SEND_RECEIPT (the entry is on disk) or SEND_ERROR."""

    def __init__(
        self, links: Links | None, session: OwnerSession, producer_id: int, topic: str, name: str
    ) -> None:
        self._links = links
        self.session = session
        self.producer_id = producer_id
        self.topic = topic
        #: The producer name its messages carry (``mqtt-{client id}``).
        self.name = name
        self.last_sequence_id = -1
        self.closed = False
        self._pending: deque[Stored] = deque()
        #: Done once no send is waiting for its receipt (or it closed): ``drained``.
        self._drained: asyncio.Future[None] | None = None

    def send(self, sequence_id: int, data: bytes, stored: Stored, chunk: bool = False) -> None:
        if self.closed:
            stored(None, BrokerError(f"the producer on {self.topic} is closed", wire.ServiceNotReady))
            return
        send = wire.CommandSend(producer_id=self.producer_id, sequence_id=sequence_id, num_messages=1)
        if chunk:
            send.is_chunk = True
        self._pending.append(stored)
        try:
            self.session.send(wrap(send), data)
        except Exception as exc:
            self._pending.pop()
            stored(None, exc)

    def send_chunked(
        self, metadata: wire.MessageMetadata, payload: bytes, max_size: int, stored: Stored
    ) -> None:
        """A message over ``max_message_size`` in chunks, as ``large_messages.store_chunked`` stores
        one: ``stored`` once every chunk is receipted, or at the first failure."""
        chunks = split(metadata, payload, max_size)
        left = len(chunks)
        answered = False

        def one_stored(position: Position | None, exc: Exception | None) -> None:
            nonlocal left, answered
            if answered:
                return
            left -= 1
            if exc is not None or left == 0:
                answered = True
                stored(position if exc is None else None, exc)

        for chunk, data in chunks:
            self.send(chunk.sequence_id, data, one_stored, chunk=True)

    def close(self) -> None:
        """Its connection is gone: CLOSE_PRODUCER at the owner (the session is shared)."""
        if self.closed:
            return
        self.closed = True
        self.session.remove_producer(self.producer_id)
        if not self.session.closed:
            close = wire.CommandCloseProducer(
                producer_id=self.producer_id, request_id=self.session.new_request_id()
            )
            self.session.send(wrap(close))

    def drained(self) -> asyncio.Future[None] | None:
        """While sends wait for their receipts: done once none does (receipted, refused, or
        failed at its close); None when none waits."""
        if not self._pending or self.closed:
            return None
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()
        return self._drained

    def _check_drained(self) -> None:
        if self._drained is not None and (not self._pending or self.closed):
            drained, self._drained = self._drained, None
            if not drained.done():
                drained.set_result(None)

    # -- the session's callbacks (websocket/session.py's ProducerEnd) ------------------------------
    def on_receipt(self, receipt: wire.CommandSendReceipt) -> None:
        if self._pending:
            stored = self._pending.popleft()
            stored(Position(receipt.message_id.ledger_id, receipt.message_id.entry_id), None)
        self._check_drained()

    def on_send_error(self, error: wire.CommandSendError) -> None:
        if self._pending:
            self._pending.popleft()(None, BrokerError(error.message, error.error))
        self._check_drained()

    def on_closed(self, reason: str) -> None:
        """The owner closed it (its bundle moved ...) or the session ended: what was not receipted
        fails, and the next PUBLISH makes another producer."""
        self.closed = True
        pending, self._pending = self._pending, deque()
        for stored in pending:
            stored(None, BrokerError(f"{self.topic}: {reason}", wire.ServiceNotReady))
        self._check_drained()  # what it dropped is held now (resends.py)
        if self._links is None:
            return
        future = self._links.producers.get(self.topic)
        if future is not None and future.done() and not future.exception() and future.result() is self:
            del self._links.producers[self.topic]


class RemoteTopic:
    """What a consumer's owners above read of its topic (``subscription.topic``)."""

    __slots__ = ("name", "partition_index", "traffic")

    def __init__(self, name: TopicName) -> None:
        self.name = name
        self.partition_index = name.partition_index
        self.traffic = Traffic()


class AckReceipt:
    """Whether the owner has the acknowledgement of one entry on disk (``AckedOnDisk``, as a
    cursor is for a topic of this worker): where a QoS 2 message the client PUBREC'd waits to
    leave its session's record (session.py)."""

    __slots__ = ("confirmed",)
    #: A cursor's count of writes: the answer says the write happened.
    persists = 0

    def __init__(self) -> None:
        self.confirmed = False

    @property
    def dirty(self) -> bool:
        return not self.confirmed

    def is_acked(self, position: Position) -> bool:
        return self.confirmed


class RemoteSubscription:
    """A consumer's subscription at the owner: acknowledgements and permits go there as commands.
    An acknowledgement that a QoS 2 message's ``AckReceipt`` waits for asks the owner to answer it
    once it is on disk (``handlers/acks_on_disk.py``)."""

    def __init__(self, session: OwnerSession, name: TopicName, subscription: str) -> None:
        self.session = session
        self.topic = RemoteTopic(name)
        self.name = subscription
        self.traffic = Traffic()
        #: Receipts waiting for their entry's acknowledgement to be sent, by position.
        self._receipts: dict[Position, AckReceipt] = {}
        #: Called with receipts the owner answered: confirmed, or not (the question is lost with
        #: the consumer or the session: ``Outbound.receipts_answered``).
        self.on_answer: Callable[[list[AckReceipt], bool], None] = lambda receipts, confirmed: None
        #: The questions to the owner not answered yet (held until they are).
        self._asking: set[asyncio.Future[Any]] = set()

    def receipt(self, position: Position) -> AckReceipt:
        """The receipt of the acknowledgement of the entry at ``position``, to be sent."""
        found = self._receipts.get(position)
        if found is None:
            found = self._receipts[position] = AckReceipt()
        return found

    def acknowledge(self, ack: wire.CommandAck, consumer: Consumer) -> None:
        if self.session.closed or consumer.closed:
            return
        receipts = self._receipts
        if receipts:
            asked = [
                receipts.pop(position)
                for one in ack.message_id
                if (position := Position(one.ledger_id, one.entry_id)) in receipts
            ]
            if asked:
                self._ask(ack, acks_on_disk.ACKNOWLEDGE, asked)
                return
        self.session.send(wrap(ack))

    def check(self, consumer: Consumer, positions: list[Position]) -> AckReceipt:
        """A receipt confirmed once the owner has every one of ``positions`` acknowledged on disk,
        by whomever (asked of messages PUBREC'd before a restart: acknowledged again, some might
        not be whole)."""
        receipt = AckReceipt()
        ack = wire.CommandAck(consumer_id=consumer.consumer_id, ack_type=wire.CommandAck.Individual)
        for position in positions:
            ack.message_id.add(ledger_id=to_u64(position.ledger_id), entry_id=to_u64(position.entry_id))
        self._ask(ack, acks_on_disk.CHECK, [receipt])
        return receipt

    def _ask(self, ack: wire.CommandAck, what: int, receipts: list[AckReceipt]) -> None:
        ack.request_id = self.session.new_request_id()
        ack.properties.add(key=acks_on_disk.ON_DISK, value=what)
        answer = asyncio.ensure_future(self.session.request(wrap(ack), ack.request_id))
        self._asking.add(answer)
        answer.add_done_callback(self._asking.discard)
        answer.add_done_callback(lambda done: self._answered(done, receipts))

    def _answered(self, answer: asyncio.Future[Any], receipts: list[AckReceipt]) -> None:
        if answer.cancelled() or answer.exception() is not None:
            # The consumer or the session ended first: the keys are asked of the owner again
            # when a consumer of the topic is made again (``RemoteConsumer.check_delivered``).
            self.on_answer(receipts, False)
            return
        for receipt in receipts:
            receipt.confirmed = True
        self.on_answer(receipts, True)

    def acknowledge_one(self, consumer: Consumer, cumulative: bool, ledger_id: int, entry_id: int) -> bool:
        """Not taken this way here: ``acknowledge`` sends the ACK to the owner."""
        return False

    def flow(self, consumer: Consumer, permits: int) -> None:
        if not self.session.closed and not consumer.closed:
            flow = wire.CommandFlow(consumer_id=consumer.consumer_id, message_permits=permits)
            self.session.send(wrap(flow))

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer.closed:
            return
        consumer.closed = True
        self.session.remove_consumer(consumer.consumer_id)
        if not self.session.closed:
            close = wire.CommandCloseConsumer(
                consumer_id=consumer.consumer_id, request_id=self.session.new_request_id()
            )
            self.session.send(wrap(close))

    def on_writable(self, consumer: Consumer) -> None:
        """The client's socket drains: the owner's flow is by permits, nothing to do here."""


class RemoteConsumer(MqttConsumer):
    """An MQTT client's consumer on a topic another worker owns: the owner's MESSAGEs become
    PUBLISH packets as a dispatcher's entries do (``Outbound.deliver``)."""

    __slots__ = ("on_lost",)

    def __init__(
        self,
        cnx: MqttConnection,
        subscription: RemoteSubscription,
        consumer_id: int,
        name: str,
        delivery: Delivery,
        group: str | None,
    ) -> None:
        super().__init__(cnx, subscription, consumer_id, name, delivery, group)  # type: ignore[arg-type]
        #: Called when the owner closes it (its bundle moved, the session ended).
        self.on_lost: Callable[[RemoteConsumer], None] = lambda consumer: None
        subscription.on_answer = cnx.outbound.receipts_answered

    def watch(self, position: Position) -> AckReceipt:
        """The owner's answer that the acknowledgement of the entry at ``position`` is on disk."""
        subscription: RemoteSubscription = self.subscription  # type: ignore[assignment]  # made with one
        return subscription.receipt(position)

    def check_delivered(self, session: MqttSession) -> None:
        """The session's QoS 2 messages of this topic PUBREC'd before a restart (their keys read
        back from its record) leave it once the owner has them acknowledged on disk."""
        topic = str(self.subscription.topic.name)
        keys = session.unwatched(topic)
        if keys:
            subscription: RemoteSubscription = self.subscription  # type: ignore[assignment]
            session.watch_delivered(
                topic, subscription.check(self, sorted({Position(k[1], k[2]) for k in keys}))
            )

    def on_message(
        self, command: wire.CommandMessage | None, hot: HotMessage | None, payload: memoryview
    ) -> None:
        if self.closed:
            return
        if hot is not None:
            position = Position(hot.ledger_id, hot.entry_id)
        else:
            assert command is not None
            position = Position(command.message_id.ledger_id, command.message_id.entry_id)
        data = bytes(payload)
        try:
            metadata, _ = parse_metadata(memoryview(data))
            count = (
                max(metadata.num_messages_in_batch, 1) if metadata.HasField("num_messages_in_batch") else 1
            )
            entry = DispatchEntry(position, data, 0, count, metadata)
        except ProtocolError:
            entry = DispatchEntry(position, data, 0, 1, None)
        cnx: MqttConnection = self.cnx  # type: ignore[assignment]  # made with one
        self.traffic.messages_out += entry.num_messages
        self.traffic.bytes_out += len(data)
        try:
            if cnx.outbound.deliver(self, entry) and not self.closed:
                # Done with at once (QoS 0, nothing to send): the owner charged its permits.
                self.subscription.flow(self, entry.num_messages)
        except Exception:  # this client's failure: its connection goes
            log.exception("%s: delivering %s failed; closing the connection", cnx.remote, position)
            cnx.close_with(ReasonCode.UNSPECIFIED_ERROR)

    def on_end_of_topic(self) -> None:
        """A terminated topic: nothing to tell an MQTT client."""

    def on_closed(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        log.info(
            "%s: the consumer on %s at its owner ended: %s",
            self.cnx.remote,
            self.subscription.topic.name,
            reason,
        )
        self.on_lost(self)


async def subscribe(
    cnx: MqttConnection,
    owner: BrokerInfo,
    name: TopicName,
    cmd: wire.CommandSubscribe,
    delivery: Delivery,
    group: str | None,
) -> RemoteConsumer | None:
    """A consumer at ``owner`` (``cmd``'s subscription, made there if new); None if the
    connection closed meanwhile."""
    session = await cnx.links.session(owner)
    cmd.request_id = session.new_request_id()
    consumer = RemoteConsumer(
        cnx,
        RemoteSubscription(session, name, cmd.subscription),
        cmd.consumer_id,
        cmd.consumer_name,
        delivery,
        group,
    )
    session.add_consumer(cmd.consumer_id, consumer)
    try:
        for attempt in range(BUSY_RETRIES + 1):
            try:
                await session.request(wrap(cmd), cmd.request_id)
                break
            except Exception as exc:
                # The session's previous connection (taken over, or just closed) still has its
                # consumer there until the owner sees that connection close: a moment later.
                if getattr(exc, "code", None) != wire.ConsumerBusy or attempt == BUSY_RETRIES or cnx.closed:
                    raise
            await asyncio.sleep(BUSY_RETRY_S)
            cmd.request_id = session.new_request_id()
    except BaseException:
        session.remove_consumer(cmd.consumer_id)
        raise
    if cnx.closed:
        consumer.subscription.remove_consumer(consumer)
        return None
    return consumer


async def publish_once(
    service: BrokerService,
    owner: BrokerInfo,
    relayed: Relayed,
    name: TopicName,
    producer_name: str,
    message: Callable[[int], bytes],
) -> None:
    """Store one message at ``name``'s owner for a client whose connection is gone (its will):
    a session of its own, a deduplicated producer, ``message(sequence id)``'s bytes, done once
    receipted (an exception if refused)."""
    session = await open_session(service, owner, relayed)
    try:
        producer_id, request_id = 1, session.new_request_id()
        cmd = wire.CommandProducer(
            topic=str(name),
            producer_id=producer_id,
            request_id=request_id,
            producer_name=producer_name,
            user_provided_producer_name=True,
        )
        cmd.metadata.add(key=DEDUPLICATED_PROPERTY, value="true")
        receipts: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def stored(position: Position | None, exc: Exception | None) -> None:
            if receipts.done():
                return
            if exc is None:
                receipts.set_result(None)
            else:
                receipts.set_exception(exc)

        producer = RemoteProducer(None, session, producer_id, str(name), producer_name)
        session.add_producer(producer_id, producer)
        reply = await session.request(wrap(cmd), request_id)
        sequence = reply.last_sequence_id + 1
        producer.send(sequence, message(sequence), stored)
        await receipts
    finally:
        session.close()


async def drop_subscription(
    service: BrokerService, owner: BrokerInfo, name: TopicName, subscription: str
) -> None:
    """Delete the durable ``subscription`` of ``name`` at its owner: a consumer on it, then
    UNSUBSCRIBE (refused, and kept, while another consumer is on a Shared one). No client is
    behind it (its session expired), so this worker CONNECTs as itself (``worker_access.py``)."""
    me = service.namespace_service.broker_id
    session = await open_session(service, owner, identity(me))
    try:
        consumer_id, request_id = 1, session.new_request_id()
        cmd = wire.CommandSubscribe(
            topic=str(name),
            subscription=subscription,
            sub_type=wire.CommandSubscribe.Shared,
            consumer_id=consumer_id,
            consumer_name=expiry_consumer_name(me),
            request_id=request_id,
            durable=True,
            force_topic_creation=False,
        )
        try:
            await session.request(wrap(cmd), request_id)
        except Exception as exc:  # no such topic, or a member of a Shared one is on it: kept
            log.info("%s: the subscription %s is not deleted: %s", name, subscription, exc)
            return
        request_id = session.new_request_id()
        try:
            await session.request(
                wrap(wire.CommandUnsubscribe(consumer_id=consumer_id, request_id=request_id)), request_id
            )
        except Exception as exc:
            log.info("%s: the subscription %s is kept: %s", name, subscription, exc)
    finally:
        session.close()


async def make_subscriptions(
    service: BrokerService,
    owner: BrokerInfo,
    name: TopicName,
    wanted: list[tuple[str, bool, str | None]],
    initial: str,
) -> list[str]:
    """Make the durable subscriptions ``wanted`` ((name, shared, the session's role)) of ``name``
    at its owner, new ones at ``initial`` (``earliest``: a topic just created, whose first
    messages may be stored already): a consumer on each, closed at once (the subscription stays).
    Those made (or there already); one refused is logged and left out. The sessions are away (no
    client credentials are left), so this worker CONNECTs as itself, and the owner makes each
    only where its session's role may consume the topic (``worker_access.py``)."""
    me = service.namespace_service.broker_id
    session = await open_session(service, owner, identity(me))
    made = []
    try:
        for consumer_id, (subscription, shared, role) in enumerate(wanted, 1):
            request_id = session.new_request_id()
            cmd = wire.CommandSubscribe(
                topic=str(name),
                subscription=subscription,
                sub_type=wire.CommandSubscribe.Shared if shared else wire.CommandSubscribe.Exclusive,
                consumer_id=consumer_id,
                consumer_name=away_consumer_name(me),
                request_id=request_id,
                durable=True,
                force_topic_creation=False,
                initial_position=(
                    wire.CommandSubscribe.Earliest if initial == "earliest" else wire.CommandSubscribe.Latest
                ),
            )
            if role is not None:  # None while authentication is off: the owner checks no role then
                cmd.metadata.add(key=ROLE_PROPERTY, value=role)
            try:
                await session.request(wrap(cmd), request_id)
            except Exception as exc:  # the role may not consume, or the client came back (its consumer)
                log.info("%s: the subscription %s is not made here: %s", name, subscription, exc)
                continue
            made.append(subscription)
            request_id = session.new_request_id()
            close = wire.CommandCloseConsumer(consumer_id=consumer_id, request_id=request_id)
            try:
                await session.request(wrap(close), request_id)
            except Exception as exc:
                log.info(
                    "%s: the consumer made for the subscription %s does not close: %s",
                    name,
                    subscription,
                    exc,
                )
    finally:
        session.close()
    return made
