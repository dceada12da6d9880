"""The MQTT server of a broker: its port, its connections, the sessions by client id, and the
topics loaded later that wildcard subscriptions pick up.

Started by ``broker/server.py`` once the broker serves (when ``mqtt_port`` is set), closed with
the Pulsar ports (``BrokerService.stop_serving``). Keepalive runs from a wheel of its own
(keepalive.py) turned every ``KEEPALIVE_CHECK_S``/16 seconds: MQTT keep alives are per client
and often shorter than the broker's Pulsar keepalive interval.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from magnetar.broker import housekeeping
from magnetar.broker.keepalive import KeepaliveWheel
from magnetar.broker.listener import Listener, listen
from magnetar.broker.mqtt import access, subscriptions
from magnetar.broker.mqtt.connection import MqttConnection
from magnetar.broker.mqtt.floods import ConnectRate
from magnetar.broker.mqtt.qos2_store import Qos2Store
from magnetar.broker.mqtt.session import NEVER, Incoming, MqttSession
from magnetar.broker.refusal import PULSAR_OUT_OF_DESCRIPTORS
from magnetar.broker.tls import HANDSHAKE_TIMEOUT_S
from magnetar.protocol.mqtt import ReasonCode

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
        self.sessions: dict[str, MqttSession] = {}
        self.keepalive = KeepaliveWheel(KEEPALIVE_CHECK_S)
        #: CONNECTs per second per client address (floods.py).
        self.connect_rate = ConnectRate(service.config.mqtt_max_connect_rate_per_ip)
        self.qos2 = Qos2Store(service.storage.metadata)
        self._listener: Listener | None = None
        #: MQTT over TLS (``mqtts_port``), with the broker's TLS settings.
        self._tls_listener: Listener | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int | None:
        return None if self._listener is None else self._listener.port

    @property
    def tls_port(self) -> int | None:
        return None if self._tls_listener is None else self._tls_listener.port

    async def start(self) -> None:
        config = self.service.config
        if config.mqtt_port is not None:
            self._listener = await listen(
                config.host,
                config.mqtt_port,
                lambda: MqttConnection(self),
                PULSAR_OUT_OF_DESCRIPTORS,
                "the MQTT port",
                "MQTT port (--mqtt-port)",
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
            )
        self._task = asyncio.create_task(housekeeping.every(self.keepalive.turn_seconds, self._turn))
        self.service.topic_listeners.append(self.topic_loaded)
        self.service.protocol_servers.append(self)

    def _turn(self) -> None:
        self.keepalive.turn(asyncio.get_running_loop().time())

    def close(self) -> None:
        """Stop accepting; tell 5.0 clients the server is shutting down, and close every connection."""
        for listener in (self._listener, self._tls_listener):
            if listener is not None:
                listener.close()
        self._listener = self._tls_listener = None
        if self._task is not None:
            self._task.cancel()
            self._task = None
        for cnx in list(self.connections):
            cnx.close_with(ReasonCode.SERVER_SHUTTING_DOWN)
        for session in self.sessions.values():
            if session.expiry_timer is not None:
                session.expiry_timer.cancel()
        self.qos2.close()

    # -- sessions --------------------------------------------------------------------------------
    def open_session(
        self, cnx: MqttConnection, client_id: str, clean: bool, expiry: int
    ) -> tuple[MqttSession, bool, asyncio.Future[Any]]:
        """The session ``cnx`` serves, whether it was present, and what must finish before its
        CONNACK (the QoS 2 records read or forgotten). A connection still serving the client id
        is taken over: closed (5.0: Session taken over), its consumers gone at once."""
        session = self.sessions.get(client_id)
        if session is not None and isinstance(session.connection, MqttConnection):
            old = session.connection
            log.info(
                "%s: client %r connected again from %s: the old connection is closed",
                old.remote,
                client_id,
                cnx.remote,
            )
            subscriptions.drop_all(old)
            old.close_with(ReasonCode.SESSION_TAKEN_OVER)
            session.connection = None
        if session is not None and session.expiry_timer is not None:
            session.expiry_timer.cancel()
            session.expiry_timer = None
        present = session is not None and not clean
        if session is None or clean:
            session = MqttSession(client_id)
            self.sessions[client_id] = session
            loading: asyncio.Future[Any] = (
                self.qos2.delete_all(client_id) if clean else self._load_records(session)
            )
        else:
            loading = asyncio.get_running_loop().create_future()
            loading.set_result(None)
        session.expiry = expiry
        session.connection = cnx
        return session, present, loading

    def _load_records(self, session: MqttSession) -> asyncio.Future[Any]:
        """A session resumed across a restart: its QoS 2 messages received and not released."""
        loading = self.qos2.load(session.client_id)

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
        if session.expiry == 0:
            self._end(session)
        elif session.expiry != NEVER:
            loop = asyncio.get_running_loop()
            session.expiry_timer = loop.call_later(session.expiry, self._end, session)

    def _end(self, session: MqttSession) -> None:
        if self.sessions.get(session.client_id) is not session or session.connection is not None:
            return
        del self.sessions[session.client_id]
        if session.incoming:
            self.qos2.delete_all(session.client_id)

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
        """A topic was created or opened again: the connected clients whose filters match it get a
        consumer there."""
        for cnx in list(self.connections):
            if cnx.session is not None and cnx.session.filters and not cnx.closed:
                try:
                    subscriptions.attach_loaded(cnx, topic)
                except Exception:
                    log.exception("%s: cannot subscribe to the new topic %s", cnx.remote, topic.name)


async def start(service: BrokerService) -> MqttServer:
    server = MqttServer(service)
    await server.start()
    service.mqtt_port = server.port
    service.mqtts_port = server.tls_port
    return server
