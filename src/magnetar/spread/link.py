"""A follower's link to a topic's owner: one broadcast consumer of the followed subscription,
connected to the owner's own port with Magnetar's client connection (docs/architecture.md, the
spread).

- Its MESSAGEs say how far the topic is durable: each one's position goes to the follower
  (``LinkEvents.on_durable``), which reads the entry from the files; the link grants permits
  generously, so that the owner never waits for it.
- It acknowledges, cumulatively, where the follower's slowest consumer is (``acknowledge``): the
  owner's stored cursor is then at the slowest consumer of every worker. A position behind what it
  acknowledged before (a consumer joined the follower behind the others) cannot be acknowledged
  back: the link subscribes again under a second name (``_rejoin``), which puts it at the owner's
  stored cursor, and only then closes its first consumer.
- Every ``poll_interval`` it asks GET_LAST_MESSAGE_ID: the last durable position (a notice lost
  to a reconnect is made good) and the stored cursor (``on_stored_cursor``: a skip, expiry or
  eviction at the owner reaches the follower's consumers).
- Its connection lost, or its consumer closed by the owner (an unload, a seek), it connects again
  to whoever owns the topic now, under the same name, so the owner resumes its place; a worker
  that finds itself the owner tells the follower (``on_owned_here``) and stops. Closed by the
  owner while no consumer is connected to the follower (``on_closed_by_owner``: the owner let an
  UNSUBSCRIBE through past this idle link, or unloads), it closes instead, and the follower lets
  the subscription go.
- A seek at the owner (asked by any worker's consumer, or the admin API) is noted in the shared
  store before the owner closes the subscription's consumers, this link's too (``resets``): the
  link finds it when closed, or when it connects again, and once subscribed again tells the
  follower to start its consumers over there (``on_reset``).
- A SEEK or UNSUBSCRIBE of a follower's consumer is asked of the owner as the link's consumer's
  (``seek``, ``unsubscribe``).
- MQTT's broadcast subscription ``mqtt-subscribers`` is not durable (``LinkTarget.durable``): the
  link's consumer is not either, and when it subscribes again, it asks the owner for a
  subscription made anew (its consumers all went) to start where the follower's slowest consumer
  is (``start_message_id``), so that the follower's clients miss nothing while the owner restarts
  or the bundle moves.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
from collections.abc import Callable
from typing import Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.follower_topic import LinkEvents
from magnetar.broker.ownership import BrokerInfo
from magnetar.broker.spread import LinkTarget
from magnetar.broker.worker_credentials import AUTH_METHOD as WORKER_METHOD
from magnetar.broker.worker_credentials import WorkerSecret, identity
from magnetar.client.authentication import Authentication
from magnetar.client.connection import Connection
from magnetar.client.errors import ClientError, ServerError
from magnetar.client.service_url import parse_service_url
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE
from magnetar.protocol.commands import wrap
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.protocol.message_id import to_signed, to_u64
from magnetar.storage.position import Position

log = logging.getLogger(__name__)

#: Permits granted at a time; more are granted once fewer than half are left.
PERMITS = 1_000_000
#: Seconds between reconnect attempts: from the first to the longest.
BACKOFF_S = (0.1, 2.0)


class OwnerLink:
    """``spread.StartingLink`` over a client connection to the owner's own pulsar:// port."""

    def __init__(
        self,
        target: LinkTarget,
        owner: Callable[[], BrokerInfo | None],
        me: str,
        resets: Callable[[], int],
        poll_interval: float = 1.0,
        operation_timeout: float = 10.0,
        authentication: Authentication | None = None,
    ) -> None:
        self.target = target
        #: What the link CONNECTs with: its worker's own identity, with authentication on.
        self._authentication = authentication
        self._owner = owner
        self._me = me
        self._resets_now = resets
        #: The owner's resets of the subscription as last seen, and whether the follower is to be
        #: told of one once the link has subscribed again.
        self._resets = 0
        self._reset_pending = False
        self._poll_interval = poll_interval
        self._operation_timeout = operation_timeout
        self._cnx: Connection | None = None
        self._consumer_ids = itertools.count()
        self._consumer_id = -1
        #: The names its consumer takes in turn: a rejoin subscribes under the other one before the
        #: current one leaves, so that the owner's floor never passes the link meanwhile.
        self._names = (target.consumer_name, f"{target.consumer_name}.b")
        self._name = 0
        self._events: LinkEvents | None = None
        #: The last durable position the owner told of, and its stored cursor as last asked.
        self._durable = Position(-1, -1)
        self._stored: Position | None = None
        #: Where the follower's slowest consumer is, and what was acknowledged of it.
        self._wanted: Position | None = None
        self._acked: Position | None = None
        self._ack_scheduled = False
        self._permits_left = 0
        self._task: asyncio.Task | None = None
        self._rejoining: asyncio.Task | None = None
        self._closed = False
        #: A SEEK asked of the owner is in flight (the owner closes the link's consumer with the others).
        self._seeking = False
        self.reconnects = 0  # stats, tests
        self.rejoins = 0

    # -- StartingLink ------------------------------------------------------------------------------
    async def start(self) -> tuple[Position, Position]:
        owner = self._owner()
        if owner is None or owner.broker_id == self._me:
            raise BrokerError(f"{self.target.topic} has no other owner to follow", wire.ServiceNotReady)
        try:
            last, stored = await self._connect(owner)
            self._resets = self._resets_now()
        except ServerError as exc:
            raise BrokerError(f"the owner {owner.broker_id} refused: {exc}", exc.code) from None
        except (ClientError, OSError, ProtocolError) as exc:
            raise BrokerError(
                f"cannot reach the owner {owner.broker_id}: {exc}", wire.ServiceNotReady
            ) from None
        self._task = asyncio.create_task(self._run(), name=f"magnetar-spread-{self.target.topic}")
        return last, stored

    def attach(self, events: LinkEvents) -> None:
        self._events = events
        if self._durable.entry_id >= 0 or self._durable.ledger_id >= 0:
            events.on_durable(self._durable)

    # -- OwnerLink ---------------------------------------------------------------------------------
    def acknowledge(self, position: Position) -> None:
        self._wanted = position
        if not self._ack_scheduled and not self._closed:
            self._ack_scheduled = True
            asyncio.get_running_loop().call_soon(self._send_ack)

    async def seek(self, seek: wire.CommandSeek) -> Position:
        cnx = self._ready("seek")
        asked = wire.CommandSeek(consumer_id=self._consumer_id)
        if seek.HasField("message_id"):
            asked.message_id.CopyFrom(seek.message_id)
        if seek.HasField("message_publish_time"):
            asked.message_publish_time = seek.message_publish_time
        self._seeking = True
        try:
            await self._at_owner(cnx, asked, "seek")
        finally:
            self._seeking = False
        # The owner closed every consumer of the subscription, this one first (its CLOSE_CONSUMER
        # came before the answer): subscribe again at once, where the subscription is now.
        cnx.remove_consumer(self._consumer_id)
        self._wanted = None  # the follower's consumers start over
        try:
            _, stored = await self._subscribe(cnx, self._names[self._name])
        except (ClientError, OSError) as exc:
            self._reset_pending = True  # reconnected by _run, which tells the follower the reset
            self._drop(cnx)
            again = f"subscribing again after the seek failed: {exc}"
            raise BrokerError(again, wire.ServiceNotReady) from None
        self._resets = self._resets_now()  # this one, told to the follower by the caller
        return stored

    async def unsubscribe(self) -> None:
        cnx = self._ready("unsubscribe")
        await self._at_owner(cnx, wire.CommandUnsubscribe(consumer_id=self._consumer_id), "unsubscribe")
        cnx.remove_consumer(self._consumer_id)

    def _ready(self, what: str) -> Connection:
        """The connection to ask the owner on, as the link's consumer."""
        cnx = self._cnx
        if cnx is None or cnx.is_closed or self._closed or self._rejoining is not None or self._seeking:
            raise BrokerError(
                f"{what}: the link to the owner of {self.target.topic} is reconnecting, try again",
                wire.ServiceNotReady,
            )
        return cnx

    async def _at_owner(self, cnx: Connection, body: Any, what: str) -> Any:
        """``body`` asked of the owner; its refusal raised as the BrokerError to answer with."""
        try:
            return await cnx.request(body)
        except ServerError as exc:
            raise BrokerError(f"{what} at the owner: {exc}", exc.code) from None
        except (ClientError, OSError) as exc:
            raise BrokerError(f"{what}: the owner was not reached: {exc}", wire.ServiceNotReady) from None

    def _drop(self, cnx: Connection) -> None:
        """Give ``cnx`` up: ``_run`` connects again."""
        if self._cnx is cnx:
            self._cnx = None
        task = asyncio.get_running_loop().create_task(cnx.close())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    @property
    def closed(self) -> bool:
        """Closed for good: it connects to no owner again."""
        return self._closed

    def close(self, give_up: bool) -> None:
        if self._closed:
            return
        self._closed = True
        for task in (self._task, self._rejoining):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        cnx, self._cnx = self._cnx, None
        if cnx is None or cnx.is_closed:
            return
        if give_up:  # closed by its client: the owner drops its place at once
            with contextlib.suppress(ClientError):
                cnx.send_command(
                    wrap(
                        wire.CommandCloseConsumer(
                            consumer_id=self._consumer_id, request_id=cnx.new_request_id()
                        )
                    )
                )
        task = asyncio.get_running_loop().create_task(cnx.close())
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    # -- the connection ----------------------------------------------------------------------------
    async def _connect(self, owner: BrokerInfo) -> tuple[Position, Position]:
        url = owner.service_url or owner.service_url_tls
        if url is None:
            raise BrokerError(f"{owner.broker_id} has no Pulsar port to follow it on", wire.ServiceNotReady)
        host, port = parse_service_url(url)[0]
        cnx = await Connection.open(
            host,
            port,
            operation_timeout=self._operation_timeout,
            ssl_context=_same_machine_tls() if url.startswith("pulsar+ssl://") else None,
            authentication=self._authentication,
        )
        try:
            last, stored = await self._subscribe(cnx, self._names[self._name])
        except BaseException:
            await cnx.close()
            raise
        self._cnx = cnx
        return last, stored

    async def _subscribe(self, cnx: Connection, name: str) -> tuple[Position, Position]:
        """SUBSCRIBE as the follower's broadcast consumer ``name``, ask where the topic and the
        subscription are, and grant permits; it is the link's consumer from then on."""
        target = self.target
        consumer_id = next(self._consumer_ids)
        cnx.register_consumer(consumer_id, self)
        subscribe = wire.CommandSubscribe(
            topic=target.topic,
            subscription=target.subscription,
            sub_type=wire.CommandSubscribe.Exclusive,
            consumer_id=consumer_id,
            consumer_name=name,
            durable=target.durable,
            initial_position=target.initial_position,
        )
        subscribe.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
        if not target.durable and self._wanted is not None:
            # MQTT's subscription, made anew at the owner when its consumers were all gone (it
            # restarted, the bundle moved): from where the follower's consumers are, not its end.
            subscribe.start_message_id.ledger_id = to_u64(self._wanted.ledger_id)
            subscribe.start_message_id.entry_id = to_u64(self._wanted.entry_id)
        await cnx.request(subscribe)
        last, stored = await self._ask(cnx, consumer_id)
        self._permits_left = PERMITS
        cnx.send_command(wrap(wire.CommandFlow(consumer_id=consumer_id, message_permits=PERMITS)))
        self._consumer_id = consumer_id
        self._acked = None  # the owner resumed its place as it kept it (or starts it at the stored cursor)
        if self._wanted is not None:
            self.acknowledge(self._wanted)
        return last, stored

    async def _ask(self, cnx: Connection, consumer_id: int | None = None) -> tuple[Position, Position]:
        asked = wire.CommandGetLastMessageId(
            consumer_id=self._consumer_id if consumer_id is None else consumer_id
        )
        answer = await cnx.request(asked)
        last = _position(answer.last_message_id)
        stored = _position(answer.consumer_mark_delete_position)
        self._on_durable(last)
        self._stored = stored
        return last, stored

    async def _run(self) -> None:
        """Poll the owner; reconnect when the connection or the consumer is lost."""
        backoff = BACKOFF_S[0]
        while not self._closed:
            cnx = self._cnx
            if cnx is None or cnx.is_closed:
                if not await self._reconnect():
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, BACKOFF_S[1])
                    continue
                backoff = BACKOFF_S[0]
            elif not self._seeking:
                try:
                    _, stored = await self._ask(cnx)
                except ServerError:
                    pass  # its consumer was replaced meanwhile (a seek, a rejoin): asked next time
                except (ClientError, OSError):
                    continue  # lost meanwhile: reconnected above
                else:
                    if self._events is not None:
                        self._events.on_stored_cursor(stored)
            await asyncio.sleep(self._poll_interval)

    async def _reconnect(self) -> bool:
        """Connect to the topic's owner now; False if that failed (tried again later)."""
        owner = self._owner()
        if owner is not None and owner.broker_id == self._me:
            log.info("%s: %s is owned here now", self._me, self.target.topic)
            self._closed = True
            if self._events is not None:
                self._events.on_owned_here()
            return True
        if owner is None:
            return False
        try:
            _, stored = await self._connect(owner)
        except (ClientError, OSError, ProtocolError, BrokerError) as exc:
            log.debug("%s: following %s at %s failed: %s", self._me, self.target.topic, owner.broker_id, exc)
            return False
        self.reconnects += 1
        self._note_resets()
        reset, self._reset_pending = self._reset_pending, False
        if self._events is not None:
            if reset:  # before the acknowledgement _subscribe scheduled is sent, which is void now
                self._wanted = None
                self._events.on_reset(stored)
            else:
                self._events.on_stored_cursor(stored)
        return True

    def _send_ack(self) -> None:
        self._ack_scheduled = False
        wanted, cnx = self._wanted, self._cnx
        if wanted is None or cnx is None or cnx.is_closed or self._closed or wanted == self._acked:
            return
        if self._acked is not None and wanted < self._acked:
            if self._rejoining is None:
                self._rejoining = asyncio.create_task(self._rejoin(cnx))
            return
        ack = wire.CommandAck(consumer_id=self._consumer_id, ack_type=wire.CommandAck.Cumulative)
        ack.message_id.add(ledger_id=to_u64(wanted.ledger_id), entry_id=to_u64(wanted.entry_id))
        with contextlib.suppress(ClientError):
            cnx.send_command(wrap(ack))
            self._acked = wanted

    async def _rejoin(self, cnx: Connection) -> None:
        """Go back to where the follower's slowest consumer is: subscribe under the other name (a
        new consumer starts at the owner's stored cursor), then close the last one (the owner drops
        its place). The owner's floor is held by one or the other all along."""
        leaving = self._consumer_id
        try:
            self._name ^= 1
            _, stored = await self._subscribe(cnx, self._names[self._name])
            await cnx.request(wire.CommandCloseConsumer(consumer_id=leaving))
            cnx.remove_consumer(leaving)
            self.rejoins += 1
            if self._events is not None:
                self._events.on_stored_cursor(stored)
        except (ClientError, OSError) as exc:
            log.debug("%s: rejoining %s failed: %s", self._me, self.target.topic, exc)
            with contextlib.suppress(Exception):
                await cnx.close()  # reconnected by _run, which acknowledges again
        finally:
            self._rejoining = None

    # -- ConsumerHandler ---------------------------------------------------------------------------
    def on_message(self, cnx: Connection, message: wire.CommandMessage, payload: memoryview) -> None:
        self._on_durable(_position(message.message_id))
        self._permits_left -= _messages_in(payload)
        if self._permits_left < PERMITS // 2:
            self._permits_left += PERMITS
            with contextlib.suppress(ClientError):
                cnx.send_command(
                    wrap(wire.CommandFlow(consumer_id=self._consumer_id, message_permits=PERMITS))
                )

    def on_close_by_broker(self, cnx: Connection) -> None:
        if self._seeking:
            return  # the seek closed it: subscribed again once the owner answers
        if not self._closed:
            self._note_resets()  # a seek (or an unsubscribe) notes itself before closing the consumers
            if self._events is not None and self._events.on_closed_by_owner(self._reset_pending):
                self.close(give_up=False)  # let go here: its consumer is gone at the owner
                return
            self._drop(cnx)  # _run connects again, to whoever owns the topic now

    def _note_resets(self) -> None:
        """Whether the owner noted the subscription reset since the link last looked."""
        try:
            now = self._resets_now()
        except Exception as exc:  # the shared store: looked at again on the next reconnect
            log.warning("%s: reading the resets of %s failed: %s", self._me, self.target.topic, exc)
            return
        if now != self._resets:
            self._resets = now
            self._reset_pending = True

    def on_connection_closed(self, cnx: Connection) -> None:
        if self._cnx is cnx:
            self._cnx = None

    def on_active_consumer_change(self, cnx: Connection, is_active: bool) -> None:
        return

    def on_reached_end_of_topic(self, cnx: Connection) -> None:
        return

    def _on_durable(self, position: Position) -> None:
        if position > self._durable:
            self._durable = position
            if self._events is not None:
                self._events.on_durable(position)


def _same_machine_tls() -> ssl.SSLContext:
    """TLS to another worker of this broker, on this machine: its certificate is this broker's
    own, so it is not verified (as the WebSocket API's sessions to owners)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


class WorkerIdentity(Authentication):
    """The link's credentials: its worker's own identity, sealed with the workers' secret
    (``worker_credentials.identity``); sealed again at each CONNECT (a seal is good for a minute)."""

    auth_method_name = WORKER_METHOD

    def __init__(self, secret: WorkerSecret, broker_id: str) -> None:
        self._secret = secret
        self._identity = identity(broker_id)

    def auth_data(self) -> bytes:
        return self._secret.seal(self._identity)


def _position(msg_id: wire.MessageIdData) -> Position:
    return Position(to_signed(msg_id.ledger_id), to_signed(msg_id.entry_id))


def _messages_in(payload: memoryview) -> int:
    """Permits the entry took: its batch's message count (1 when it is not a batch, or unreadable)."""
    try:
        _, producer_bytes = split_entry_metadata(payload)
        metadata, _ = parse_metadata(producer_bytes)
    except ProtocolError:
        return 1
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
