"""The MQTT server's sessions by client id: opened and resumed at CONNECT, taken over, ended by
a clean start or their Session Expiry Interval, and brought back after a broker restart.

A durable session (``session.py``) keeps its record in the metadata store (``session_store.py``):
written before the CONNACK that starts it, before each SUBACK and UNSUBACK, and when its
connection closes (the time, from which its expiry counts, also after a restart). Ending one
deletes its record first, then its durable subscriptions (on topics not loaded too) and its QoS 2
records; a client connecting again meanwhile waits for that before its CONNACK.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from typing import TYPE_CHECKING, Any

from magnetar.broker.authorization import CONSUME
from magnetar.broker.mqtt import remote, subscriptions, will
from magnetar.broker.mqtt.records import RecordWriter
from magnetar.broker.mqtt.session import NEVER, Incoming, MqttSession, expires_at
from magnetar.broker.mqtt.session_store import SessionStore
from magnetar.protocol.mqtt import ReasonCode
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.broker.mqtt.server import MqttServer
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic

log = logging.getLogger(__name__)


class Sessions:
    def __init__(self, server: MqttServer, writer: RecordWriter) -> None:
        self.server = server
        self.service = server.service
        self.by_client: dict[str, MqttSession] = {}
        self.store = SessionStore(server.service.storage.metadata, writer)
        #: Sessions being ended (their subscriptions deleted), by client id.
        self._ending: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        #: The broker is stopping: connections closing now end nothing.
        self.closing = False
        #: (topic, share name) -> the client ids of the group's members that keep keys of QoS 2
        #: messages of the topic they PUBREC'd (``MqttSession.delivered``): the group's
        #: subscription may hand such a message out again, after a restart, to another member,
        #: which must not take it as new either (``group_holders``).
        self.group_delivered: dict[tuple[str, str], set[str]] = {}

    @property
    def default_namespace(self) -> str:
        config = self.service.config
        return f"{config.mqtt_default_tenant}/{config.mqtt_default_namespace}"

    # -- QoS 2 messages a group's member received ---------------------------------------------------
    def delivered_in_group(self, topic: str, group: str, client_id: str) -> None:
        """The member ``client_id`` of ``group`` keeps the key of a QoS 2 message of ``topic``."""
        self.group_delivered.setdefault((topic, group), set()).add(client_id)

    def group_holders(self, topic: str, group: str) -> list[MqttSession] | None:
        """The members of ``group`` that keep keys of QoS 2 messages of ``topic`` they received
        (None: none; those that keep none any more are forgotten here)."""
        ids = self.group_delivered.get((topic, group))
        if ids is None:
            return None
        holders = []
        for client_id in list(ids):
            session = self.by_client.get(client_id)
            if session is None or session.ended or not session.any_delivered():
                ids.discard(client_id)
            else:
                holders.append(session)
        if not ids:
            del self.group_delivered[(topic, group)]
        return holders or None

    # -- start-up --------------------------------------------------------------------------------
    def restore(self, stored: list[MqttSession], now: float) -> None:
        """The durable sessions stored before a restart, none connected: each ends when its
        expiry, counted from when its connection closed, has passed (at once if it has)."""
        for session in stored:
            self.by_client[session.client_id] = session
            if session.any_delivered() and session.groups:
                received = {key[0] for key in session.delivered_keys()}
                for topic, group in session.groups:
                    if topic in received:
                        self.delivered_in_group(topic, group, session.client_id)
            if session.disconnected_at is None:  # connected when the broker stopped
                session.disconnected_at = now
                self.store.update(session)
            if session.pending_will is not None and session.will_due is not None:
                # held back before the restart: due as it was (a connection of its own to publish it)
                held, role = session.pending_will[0], session.will_role
                log.info("MQTT client %r: its will held back before the restart is due", session.client_id)
                will.hold(
                    self.server,
                    session,
                    held,
                    self.server.detached(session.client_id, role),
                    session.will_due,
                )
            at = expires_at(session.expiry, session.disconnected_at, now)
            if at is None:
                continue
            if at <= now:
                log.info("MQTT session %r expired while the broker was down", session.client_id)
                self.end(session)
            else:
                loop = asyncio.get_running_loop()
                session.expiry_timer = loop.call_later(at - now, self._expire, session)
        if stored:
            log.info("%d durable MQTT sessions restored", len(self.by_client))

    # -- connecting ------------------------------------------------------------------------------
    def open(
        self, cnx: MqttConnection, client_id: str, clean: bool, expiry: int
    ) -> tuple[MqttSession, bool, asyncio.Future[Any]]:
        """The session ``cnx`` serves, whether it was present, and what must finish before its
        CONNACK (an old session ended, the QoS 2 records read, the new record written). A
        connection still serving the client id is taken over: closed (5.0: Session taken over),
        its consumers and producers gone at once. Only a durable session is resumed: one that ends with its
        connection is never present to the next."""
        session = self.by_client.get(client_id)
        if session is not None and session.connection is not None:
            old: MqttConnection = session.connection  # type: ignore[assignment]  # only connections are set
            log.info(
                "%s: client %r connected again from %s: the old connection is closed",
                old.remote,
                client_id,
                cnx.remote,
            )
            subscriptions.drop_all(old)
            old.release_producers()
            old.close_with(ReasonCode.SESSION_TAKEN_OVER)
            session.connection = None
        if session is not None and not session.durable:
            # A session that ends with its connection (3.1.1 Clean Session 1, 5.0 expiry 0)
            # ended with the one just taken over (4.1, 3.1.2.4): nothing is resumed, whatever
            # this CONNECT asks; a session it wants kept starts afresh (durable if asked).
            clean = True
        if session is not None and session.expiry_timer is not None:
            session.expiry_timer.cancel()
            session.expiry_timer = None
        if session is not None and not clean:
            will.cancel(session)  # resumed before its Will Delay Interval passed
        waits: list[asyncio.Future[Any]] = []
        present = session is not None and not clean
        if session is not None and clean:
            self.end(session)
        if (ending := self._ending.get(client_id)) is not None:
            waits.append(ending)
        if session is None or clean:
            loaded = session is not None
            session = MqttSession(client_id, durable=expiry > 0)
            self.by_client[client_id] = session
            if clean:
                if not loaded:  # records left by a session this broker no longer knows of
                    waits.append(self.server.qos2.delete_all(client_id))
            else:
                waits.append(self._load_records(session))
        elif not session.records_loaded:
            waits.append(self._load_records(session))
        session.expiry = expiry
        session.role = cnx.auth.role
        session.connection = cnx
        session.disconnected_at = None
        if session.durable:
            waits.append(self.store.save(session))
        return session, present, _all(waits)

    def _load_records(self, session: MqttSession) -> asyncio.Future[Any]:
        """A session resumed across a restart: its QoS 2 messages received and not released."""
        loading = self.server.qos2.load(session.client_id)
        session.records_loaded = True

        def loaded(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is None:
                for packet_id, received in done.result().items():
                    session.incoming.setdefault(packet_id, Incoming(received))

        loading.add_done_callback(loaded)
        return loading

    def connection_ended(self, session: MqttSession, cnx: MqttConnection) -> None:
        """``cnx`` closed: its session ends now (expiry 0) or after its Session Expiry Interval."""
        if session.connection is not cnx:
            return  # taken over
        session.connection = None
        session.disconnected_at = time.time()
        if self.closing:
            return  # kept as it is; a durable one is restored at the next start
        if session.expiry == 0:
            self.end(session)
            return
        self.store.update(session)
        if session.expiry != NEVER:
            loop = asyncio.get_running_loop()
            session.expiry_timer = loop.call_later(session.expiry, self._expire, session)

    def _expire(self, session: MqttSession) -> None:
        session.expiry_timer = None
        if self.by_client.get(session.client_id) is session and session.connection is None:
            log.info("MQTT session %r expired", session.client_id)
            self.end(session)

    # -- ending ----------------------------------------------------------------------------------
    def end(self, session: MqttSession) -> asyncio.Future[None]:
        """End ``session``: forgotten now, its record deleted (before anything a new session of
        its client id writes), then its durable subscriptions and QoS 2 records."""
        session.ended = True
        if session.expiry_timer is not None:
            session.expiry_timer.cancel()
            session.expiry_timer = None
        if self.by_client.get(session.client_id) is session:
            del self.by_client[session.client_id]
        will.fire(self.server, session)  # a will held back goes when its session ends
        client_id = session.client_id
        if session.durable:
            self.store.delete(client_id).add_done_callback(_logged("deleting the session record", client_id))
        if not session.durable and not session.incoming:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        session.filters.clear()
        before = self._ending.get(client_id)
        ending = asyncio.ensure_future(self._ended(session, before))
        self._ending[client_id] = ending

        def finished(task: asyncio.Future[None]) -> None:
            if self._ending.get(client_id) is task:
                del self._ending[client_id]
            _logged("ending the session", client_id)(task)

        ending.add_done_callback(finished)
        return ending

    async def _ended(self, session: MqttSession, before: asyncio.Future[None] | None) -> None:
        if before is not None:
            await asyncio.wait([before])
        await self.release_unmatched(session)
        if session.incoming or session.durable:
            await self.server.qos2.delete_all(session.client_id)

    async def release_unmatched(self, session: MqttSession) -> None:
        """Delete the durable subscriptions that none of the session's filters needs any more
        (all of them once it ended), then store what it holds."""
        namespace = self.default_namespace
        for topic in sorted(session.topics):
            name = _parse(topic)
            if name is not None and None in subscriptions.options_by_group(session, name, namespace):
                continue
            session.topics.discard(topic)
            session.forget_topic(topic)
            if name is not None:
                await subscriptions.drop_subscription(self.service, name, session.client_id)
        for topic, group in sorted(session.groups):
            name = _parse(topic)
            if name is not None and group in subscriptions.options_by_group(session, name, namespace):
                continue
            session.groups.discard((topic, group))
            if name is not None:
                held = functools.partial(self._group_held, topic=topic, group=group)
                await subscriptions.drop_subscription(self.service, name, group, held)
        if session.durable and not session.ended:
            await self.store.save(session)

    def _group_held(self, subscription: PersistentSubscription, *, topic: str, group: str) -> bool:
        """A shared subscription stays while it has consumers or a session is a member."""
        return bool(subscription.consumers) or any(
            other.holds_group(topic, group) for other in self.by_client.values()
        )

    # -- topics loaded later ---------------------------------------------------------------------
    def topic_loaded(self, topic: PersistentTopic, initial: str) -> None:
        """A topic was created or opened again: each durable session away whose filters match it
        gets its durable subscriptions there (at its first message if it is new), so what is
        published meanwhile waits for it, where the session's role may consume it (as at another
        worker: ``worker_access.py``)."""
        namespace = self.default_namespace
        authz = self.service.authorization
        for session in list(self.by_client.values()):
            if session.connection is not None or not session.durable or not session.filters:
                continue
            wanted = subscriptions.options_by_group(session, topic.name, namespace)
            if not wanted:
                continue
            if authz is not None and not authz.can_topic(topic.name, session.role, CONSUME):
                log.info(
                    "MQTT client %r, away: role %r may not consume %s: not subscribed",
                    session.client_id,
                    session.role,
                    topic.name,
                )
                continue
            task = asyncio.ensure_future(self._subscribe_away(session, topic.name, list(wanted), initial))
            self.keep(task, "subscribing to a new topic", session.client_id)

    async def _subscribe_away(
        self, session: MqttSession, name: TopicName, groups: list[str | None], initial: str
    ) -> None:
        key = str(name)
        held = (set(session.topics), set(session.groups))
        for group in groups:
            subscription = subscriptions.subscription_name(session, group)
            preparing = self.service.preparing(name, (subscription, initial))
            if preparing is not None:
                await preparing
            if session.ended:
                return
            if group is None:
                session.topics.add(key)
            else:
                session.groups.add((key, group))
        if (session.topics, session.groups) != held:
            self.store.update(session)

    def topic_elsewhere(self, name: TopicName, initial: str) -> None:
        """Another worker loaded ``name`` (its notice: ``MqttServer.changed_elsewhere``): the
        durable sessions away whose home is here and whose filters match it get their durable
        subscriptions there, through one session to its owner, as for a topic loaded here."""
        namespace = self.default_namespace
        key = str(name)
        wanted: list[tuple[MqttSession, str | None]] = []
        for session in list(self.by_client.values()):
            if session.connection is not None or not session.durable or not session.filters:
                continue
            for group in subscriptions.options_by_group(session, name, namespace):
                held = key in session.topics if group is None else (key, group) in session.groups
                if not held:
                    wanted.append((session, group))
        if wanted:
            task = asyncio.ensure_future(self._subscribe_elsewhere(name, wanted, initial))
            self.keep(task, "subscribing to a new topic of another worker", wanted[0][0].client_id)

    async def _subscribe_elsewhere(
        self, name: TopicName, wanted: list[tuple[MqttSession, str | None]], initial: str
    ) -> None:
        owner = remote.owner_elsewhere(self.service, name)
        if owner is None:
            return  # served here now: topic_loaded did it
        by_name = {
            subscriptions.subscription_name(session, group): (session, group) for session, group in wanted
        }
        made = await remote.make_subscriptions(
            self.service,
            owner,
            name,
            [(sub, group is not None, session.role) for sub, (session, group) in by_name.items()],
            initial,
        )
        key = str(name)
        for subscription in made:
            session, group = by_name[subscription]
            if session.ended:  # ended meanwhile: what it made goes too
                await subscriptions.drop_subscription(self.service, name, subscription)
                continue
            if group is None:
                session.topics.add(key)
            else:
                session.groups.add((key, group))
            self.store.update(session)
            log.info("MQTT client %r, away: subscribed to %s at its owner", session.client_id, name)

    def keep(self, task: asyncio.Future[Any], what: str, client_id: str) -> None:
        """Hold ``task`` until it is done, and log its failure."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_logged(what, client_id))

    def close(self) -> None:
        """The broker stops: the durable sessions its connections serve are stored as of now,
        with what they have in flight (written once the record writer has finished:
        ``MqttServer.close``)."""
        self.closing = True
        now = time.time()
        for session in self.by_client.values():
            if session.connection is not None and session.durable and not session.ended:
                session.disconnected_at = now
                self.store.stopping(session)
            if session.expiry_timer is not None:
                session.expiry_timer.cancel()
                session.expiry_timer = None
            will.cancel(session)


def _parse(topic: str) -> TopicName | None:
    try:
        return TopicName.parse(topic)
    except InvalidTopicName:
        return None


def _all(waits: list[asyncio.Future[Any]]) -> asyncio.Future[Any]:
    if not waits:
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done
    return asyncio.ensure_future(asyncio.gather(*waits))


def _logged(what: str, client_id: str) -> Any:
    def check(done: asyncio.Future[Any]) -> None:
        if not done.cancelled() and (exc := done.exception()) is not None:
            log.error("MQTT client %r: %s failed: %s", client_id, what, exc)

    return check
