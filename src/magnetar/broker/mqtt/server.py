"""The MQTT server of a broker: its port, its connections, its sessions (``sessions.py``), and
the topics loaded later that subscriptions pick up.

Started by ``broker/server.py`` once the broker serves (when ``mqtt_port`` or ``mqtts_port``, MQTT
over TLS, is set): the durable
sessions stored before are read first, then the port opens. Closed with the Pulsar ports
(``BrokerService.stop_serving``). Keepalive runs from a wheel of its own (keepalive.py) turned
every ``KEEPALIVE_CHECK_S``/16 seconds: MQTT keep alives are per client and often shorter than
the broker's Pulsar keepalive interval.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from magnetar.broker import housekeeping
from magnetar.broker.keepalive import KeepaliveWheel
from magnetar.broker.listener import Listener, listen
from magnetar.broker.mqtt import access, subscriptions
from magnetar.broker.mqtt.connection import MqttConnection
from magnetar.broker.mqtt.floods import ConnectRate
from magnetar.broker.mqtt.handoff import Handoff, TlsPeer
from magnetar.broker.mqtt.qos2_store import Qos2Store
from magnetar.broker.mqtt.records import RecordWriter
from magnetar.broker.mqtt.remote import OwnerLinks
from magnetar.broker.mqtt.retained import RetainedStore
from magnetar.broker.mqtt.sessions import Sessions
from magnetar.broker.refusal import PULSAR_OUT_OF_DESCRIPTORS
from magnetar.broker.tls import HANDSHAKE_TIMEOUT_S
from magnetar.protocol.mqtt import ReasonCode
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import PersistentTopic

log = logging.getLogger(__name__)
#: Each connection's keep alive is looked at about this often.
KEEPALIVE_CHECK_S = 1.0


class MqttServer:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.connections: set[MqttConnection] = set()
        self.keepalive = KeepaliveWheel(KEEPALIVE_CHECK_S)
        #: CONNECTs per second per client address (floods.py).
        self.connect_rate = ConnectRate(service.config.mqtt_max_connect_rate_per_ip)
        metadata = service.storage.metadata
        self.qos2 = Qos2Store(metadata)
        #: Threads writing the session records (one write at a time each: records.py).
        self._records = ThreadPoolExecutor(2, thread_name_prefix="magnetar-mqtt-records")
        #: Messages that went to some client without a property MQTT cannot carry, or not at all
        #: (a Topic Name MQTT cannot carry, past the client's Maximum Packet Size): ``outbound.py``.
        self.unsendable = 0
        self.sessions = Sessions(self, RecordWriter(metadata, self._records, "MQTT session"))
        self.retained = RetainedStore(
            metadata, RecordWriter(metadata, self._records, "MQTT retained message")
        )
        self._listener: Listener | None = None
        #: MQTT over TLS (``mqtts_port``), with the broker's TLS settings.
        self._tls_listener: Listener | None = None
        self._task: asyncio.Task[None] | None = None
        #: With workers: the sessions' home workers (handoff.py).
        self.handoff: Handoff | None = None
        #: Sessions to the other workers, shared by this worker's connections (remote.py).
        self.owner_links = OwnerLinks(service)
        #: Retained messages another worker set, being read again.
        self._rereading: set[asyncio.Future[str | None]] = set()
        worker = service.worker
        if worker is not None:  # every worker serves MQTT, each session at its home (handoff.py)
            self.handoff = Handoff(
                service.config.data_dir,
                worker.index,
                service.config.worker_count(),
                self._take,
                service.worker_secret,
            )
            self.retained.changed = self._retained_changed

    @property
    def port(self) -> int | None:
        return None if self._listener is None else self._listener.port

    @property
    def tls_port(self) -> int | None:
        return None if self._tls_listener is None else self._tls_listener.port

    async def start(self) -> None:
        config = self.service.config
        loop = asyncio.get_running_loop()
        stored, broken = await loop.run_in_executor(self._records, self.sessions.store.load_all)
        for key in broken:
            log.error("the MQTT session record %s does not read: left as it is", key)
        if self.handoff is not None:  # each worker keeps (and expires) the sessions whose home it is
            stored = [session for session in stored if self.handoff.is_home(session.client_id)]
            self.handoff.start()
        self.sessions.restore(stored, time.time())
        for key in await loop.run_in_executor(self._records, self.retained.load):
            log.error("the MQTT retained message record %s does not read: left as it is", key)
        # A worker listens on the port its supervisor reserved (SO_REUSEPORT), as on the Pulsar port.
        shared = self.service.worker is not None
        if config.mqtt_port is not None:
            self._listener = await listen(
                config.host,
                config.mqtt_port,
                lambda: MqttConnection(self),
                PULSAR_OUT_OF_DESCRIPTORS,
                "the MQTT port",
                "MQTT port (--mqtt-port)",
                reuse_port=shared,
            )
        if config.mqtts_port is not None:
            self._tls_listener = await listen(
                config.host,
                config.mqtts_port,
                lambda: MqttConnection(self),
                PULSAR_OUT_OF_DESCRIPTORS,
                "the MQTT TLS port",
                "MQTT TLS port (--mqtts-port)",
                tls=self.service.ssl_context,
                handshake_timeout=HANDSHAKE_TIMEOUT_S,
                reuse_port=shared,
            )
        self._task = asyncio.create_task(housekeeping.every(self.keepalive.turn_seconds, self._turn))
        self.service.topic_listeners.append(self.topic_loaded)
        self.service.change_listeners.append(self.changed_elsewhere)
        self.service.protocol_servers.append(self)

    def _turn(self) -> None:
        self.keepalive.turn(asyncio.get_running_loop().time())

    def close(self) -> None:
        """Stop accepting; tell 5.0 clients the server is shutting down, and close every connection."""
        self.sessions.close()
        if self.handoff is not None:
            self.handoff.close()
        self.owner_links.close()
        for listener in (self._listener, self._tls_listener):
            if listener is not None:
                listener.close()
        self._listener = self._tls_listener = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for cnx in list(self.connections):
            cnx.close_with(ReasonCode.SERVER_SHUTTING_DOWN)
        self.qos2.close()
        self._records.shutdown(wait=True)
        self.sessions.store.flush_now()  # what was not written yet, the sessions stopped above too

    def detached(self, client_id: str, role: str | None) -> MqttConnection:
        """A connection of no socket for what a client's session does without one after a
        restart (its will held back: will.py), as the client's ``role``."""
        cnx = MqttConnection(self)
        cnx.remote = f"(restored session {client_id!r})"
        cnx.auth.role = role
        return cnx

    # -- workers -----------------------------------------------------------------------------------
    def _take(self, sock: socket.socket, data: bytes, tls_peer: TlsPeer | None) -> None:
        """A connection another worker handed over (handoff.py), or the local end of a TLS
        connection it relays (``tls_peer``: relay.py): served from its first byte."""
        log.debug(
            "a connection handed over by another worker (%d so far)",
            self.handoff.taken if self.handoff else 0,
        )
        loop = asyncio.get_running_loop()
        accepting = asyncio.ensure_future(
            loop.connect_accepted_socket(lambda: MqttConnection(self, data, tls_peer), sock)
        )

        def accepted(done: asyncio.Future[Any]) -> None:
            if done.cancelled() or done.exception() is not None:
                log.warning("a connection handed over cannot be served: %s", done.exception())
                sock.close()

        accepting.add_done_callback(accepted)

    async def retained_current(self) -> None:
        """With workers, before a SUBACK's retained messages: the retained messages other workers
        set before the SUBSCRIBE came (their changes are published before their PUBACK) are read
        here first."""
        if self.handoff is None:
            return
        poll = self.service.poll_changes
        if poll is not None:
            poll()
        if self._rereading:
            await asyncio.gather(*self._rereading, return_exceptions=True)

    def _reread(self, topic: str, done: asyncio.Future[str | None]) -> None:
        if done.cancelled() or done.exception() is not None:
            log.error("%s: its retained message cannot be read again: %s", topic, done.exception())
            return
        self.retained.reloaded(topic, done.result())

    def _retained_changed(self, topic: str) -> None:
        """A retained message was set here: the other workers read it again."""
        try:
            self.service.namespace_service.store.publish_change(RETAINED_CHANGED + topic)
        except Exception:
            log.exception("%s: its retained message cannot be announced to the other workers", topic)

    # -- credentials and grants (access.py) --------------------------------------------------------
    def check_credentials(self, now: float) -> None:
        """Every authentication_refresh_check_seconds: connections whose credentials expired go."""
        for cnx in list(self.connections):
            access.credentials_expired(cnx, now)

    def recheck_permissions(self, namespace: str) -> None:
        """The namespace's grants changed: what a role lost is taken from its connections."""
        for cnx in list(self.connections):
            access.recheck_permissions(cnx, namespace)

    # -- topics loaded later ---------------------------------------------------------------------
    def topic_loaded(self, topic: PersistentTopic) -> None:
        """A topic was created or opened again: the clients whose filters match it get a consumer
        there, and the durable sessions away their durable subscriptions. A subscription made now
        starts at the topic's first message if it has none yet (a new topic: its first messages
        are being published), else at its end."""
        initial = "earliest" if topic.ml.first_position() is None else "latest"
        for cnx in list(self.connections):
            if cnx.session is not None and cnx.session.filters and not cnx.closed:
                try:
                    subscriptions.attach_loaded(cnx, topic, initial)
                except Exception:
                    log.exception("%s: cannot subscribe to the new topic %s", cnx.remote, topic.name)
        self.sessions.topic_loaded(topic, initial)

    def changed_elsewhere(self, path: str) -> None:
        """Another worker loaded a topic (``announce_topics``): the clients whose filters match it
        get a consumer there through its owner, and the durable sessions away their durable
        subscriptions, as for a topic loaded here. Another worker set a
        topic's retained message: read again."""
        if path.startswith(RETAINED_CHANGED):
            topic = path.removeprefix(RETAINED_CHANGED)
            reading = asyncio.get_running_loop().run_in_executor(self._records, self.retained.read, topic)
            reading.add_done_callback(functools.partial(self._reread, topic))
            self._rereading.add(reading)
            reading.add_done_callback(self._rereading.discard)
            return
        if not path.startswith(TOPIC_LOADED):
            return
        initial, _, full = path.removeprefix(TOPIC_LOADED).partition("/")
        try:
            name = TopicName.parse(full)
        except InvalidTopicName:
            return
        if self.service.serves(name):
            return  # loaded here meanwhile: topic_loaded did it
        self.sessions.topic_elsewhere(name, initial)
        for cnx in list(self.connections):
            session = cnx.session
            if session is None or not session.filters or cnx.closed:
                continue
            if not subscriptions.options_by_group(session, name, subscriptions.default_namespace(cnx)):
                continue
            task = asyncio.ensure_future(subscriptions.attach_topic(cnx, name, initial))
            task.add_done_callback(functools.partial(_logged, cnx, name))


#: The change another worker publishes when it loads a topic: ``mqtt-topic/{initial}/{topic}``.
TOPIC_LOADED = "mqtt-topic/"
#: The change a worker publishes when it set a topic's retained message: ``mqtt-retained/{topic}``.
RETAINED_CHANGED = "mqtt-retained/"


def _logged(cnx: MqttConnection, name: TopicName, done: asyncio.Future[None]) -> None:
    if not done.cancelled() and (exc := done.exception()) is not None:
        log.warning("%s: cannot subscribe to the topic %s: %s", cnx.remote, name, exc)


def announce_topics(service: BrokerService) -> None:
    """With workers: every topic this one loads is announced to the workers serving MQTT
    (through the store of owners' changes, read every 100 ms), whose clients' wildcard filters
    may match it (``changed_elsewhere``)."""
    store = service.namespace_service.store

    def loaded(topic: PersistentTopic) -> None:
        initial = "earliest" if topic.ml.first_position() is None else "latest"
        try:
            store.publish_change(f"{TOPIC_LOADED}{initial}/{topic.name}")
        except Exception:
            log.exception("%s: cannot announce it to the MQTT worker", topic.name)

    service.topic_listeners.append(loaded)


async def start(service: BrokerService) -> MqttServer:
    server = MqttServer(service)
    await server.start()
    service.mqtt_port = server.port
    service.mqtts_port = server.tls_port
    return server
