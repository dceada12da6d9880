"""One MQTT client's connection: bytes in, packets handled, packets out.

The socket side (reads, writes gathered per event-loop pass, flow control), the handshake
(CONNECT, CONNACK, sessions and their takeover), PINGREQ, DISCONNECT and the standard's answers
to a broken stream; PUBLISH goes to ``inbound.py``, SUBSCRIBE and UNSUBSCRIBE to
``subscriptions.py``, what subscribers are sent to ``outbound.py``.

Packets are handled in the order they came. One that must first wait for something off the loop
(a topic opened, a QoS 2 record committed, a topic listing) stops the handling of those behind it
and the reading of the socket (``wait_for``) until it is done, so a client's messages reach each
topic in the order it sent them (4.6: every topic is an Ordered Topic).

To the consumers and producers it has on topics the connection is their ``TransportCnx``: a
Pulsar command the broker sends them (CLOSE_CONSUMER ...) is taken as the event it stands for.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker import loop_pass
from magnetar.broker.auth_session import AuthSession
from magnetar.broker.mqtt import access, floods, inbound, outbound, relay, subscriptions, will
from magnetar.broker.mqtt.handoff import HOME_FULL_PATIENCE_S, HOME_FULL_RETRY_S, Handoff, HomeFull, TlsPeer
from magnetar.broker.mqtt.inbound import TOPIC_ALIAS_MAXIMUM
from magnetar.broker.mqtt.packet_room import PacketRoom
from magnetar.broker.mqtt.publish_batches import PublishBatches
from magnetar.broker.mqtt.remote import Links
from magnetar.broker.mqtt.session import NEVER, MqttSession
from magnetar.broker.names import MAX_NAME_LENGTH
from magnetar.broker.worker_credentials import Relayed
from magnetar.protocol import wire
from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    ConnAck,
    Connect,
    ConnectReturnCode,
    Disconnect,
    MqttDecoder,
    MqttError,
    Packet,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    ReasonCode,
    SubAck,
    Subscribe,
    UnsubAck,
    Unsubscribe,
    UnsupportedProtocolVersion,
    Will,
    encode,
)
from magnetar.protocol.mqtt.codes import ALLOWED_REASONS, PacketType
from magnetar.protocol.mqtt.properties import NONE

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.limits import LimitReached
    from magnetar.broker.mqtt.outbound import MqttConsumer
    from magnetar.broker.mqtt.server import MqttServer
    from magnetar.broker.producer import Producer

log = logging.getLogger(__name__)

R = ReasonCode
#: What a connection presents to another worker while authentication is off (remote.py).
NO_CREDENTIALS = Relayed("none")
#: The largest packet before CONNECT: a CONNECT holds at most a will, a user name and a password
#: of 64 KiB each; nobody unknown makes the broker buffer more.
MAX_PACKET_BEFORE_CONNECT = 256 * 1024
#: A connection that has not sent CONNECT within this many seconds is closed.
CONNECT_TIMEOUT_S = 10.0
#: QoS 1 and 2 messages in flight to a 3.1.1 client (5.0 clients say theirs: Receive Maximum).
INFLIGHT_3_1_1 = 100
#: At most this many to a 5.0 client whatever its Receive Maximum.
MAX_INFLIGHT = 1000
#: A closed connection whose output the client has not taken within this many seconds is
#: aborted: a client that stopped reading (a half-open link) must not keep its session, its will
#: and its producers for ever.
CLOSE_DRAIN_S = 1.0


#: The packets that carry a Reason String or User Properties only if the client asks for them.
_PROBLEM_INFORMATION = (PubAck, PubRec, PubRel, PubComp, SubAck, UnsubAck, Auth)


def _without_problem_information(properties: Properties) -> Properties:
    return properties.replace(reason_string=None, user_properties=())


class MqttConnection(asyncio.Protocol):
    """Slotted, and what few clients use (QoS 1 and 2 unanswered, a large packet's room) made
    when first needed: a broker holds many idle connections (docs/benchmarks.md, MQTT memory)."""

    __slots__ = (
        "_answers",
        "_flush_scheduled",
        "_held",
        "_holds",
        "_ids",
        "_keepalive_slot",
        "_links",
        "_out",
        "_passes",
        "_raw",
        "_replay",
        "_since",
        "_waiting",
        "address",
        "auth",
        "client_alias_maximum",
        "client_max_packet",
        "closed",
        "config",
        "consumers",
        "consumers_by_key",
        "counted_address",
        "decoder",
        "disconnected",
        "keep_alive",
        "last_heard",
        "no_problem_information",
        "outbound",
        "over_limit",
        "pending_stores",
        "producers",
        "producers_by_topic",
        "publish_targets",
        "publishes",
        "receive_maximum",
        "relayed",
        "remote",
        "room",
        "server",
        "server_receive_maximum",
        "service",
        "session",
        "tls_peer",
        "topic_aliases",
        "transport",
        "unanswered",
        "version",
        "will",
        "writable",
    )

    def __init__(self, server: MqttServer, replay: bytes = b"", tls_peer: TlsPeer | None = None) -> None:
        self.server = server
        #: What another worker read from this connection before handing it here (handoff.py).
        self._replay = replay
        #: A TLS connection another worker terminates and relays here: the client's address
        #: and certificate as that worker's handshake proved them (handoff.py, relay.py).
        self.tls_peer = tls_peer
        #: What was read up to the CONNECT, for a handover to the client id's home worker (a
        #: relayed connection is at its home already).
        self._raw: list[bytes] | None = [] if server.handoff is not None and tls_peer is None else None
        self.service = server.service
        self.config = server.service.config
        self.decoder = MqttDecoder(MAX_PACKET_BEFORE_CONNECT)
        self.transport: asyncio.Transport | None = None
        self.remote = "?"
        self.closed = False
        #: What the TLS handshake and the CONNECT's credentials proved (``access.py``).
        self.auth = AuthSession()
        #: The client's address; counted against the connection limits (``floods.py``), or the
        #: limit it is past (its CONNECT is then refused).
        self.address = "?"
        self.counted_address: str | None = None
        self.over_limit: LimitReached | None = None
        #: Memory set aside for a large packet being received (``packet_room.py``).
        self.room = PacketRoom(self)
        self.writable = True
        #: Set once CONNECT is accepted.
        self.session: MqttSession | None = None
        self.version = 0
        #: The client's keep alive (0: none), and when the last packet came (the loop's time).
        self.keep_alive = 0
        self.last_heard = 0.0
        self._since = 0.0
        self._keepalive_slot: int | None = None
        #: The client's own limits (5.0 CONNECT properties).
        self.client_max_packet = 0
        self.receive_maximum = INFLIGHT_3_1_1
        #: Topic Aliases the client takes from the broker (5.0: its Topic Alias Maximum).
        self.client_alias_maximum = 0
        #: The client asked for no Reason String or User Property on acknowledgements (3.1.2.11.7).
        self.no_problem_information = False
        #: QoS 1 and 2 PUBLISHes received and not yet answered with PUBACK or PUBCOMP, as
        #: (qos, packet identifier): at most the Receive Maximum announced (5.0, 3.3.4).
        self.unanswered: set[int] | None = None
        #: The same PUBLISHes in the order they came, each with its PUBACK or PUBREC once known:
        #: answers go in that order (4.6, MQTT-4.6.0-2/-3), whichever store finished first.
        self._answers: dict[int, Packet | bytes | None] | None = None
        self.server_receive_maximum = 65535
        #: A packet waiting for something off the loop; those behind it wait too.
        self._waiting: asyncio.Future[Any] | None = None
        #: Messages of this pass, stored together once it ends (``publish_batches.py``).
        self.publishes = PublishBatches()
        #: Topic Name -> where its PUBLISHes go (``inbound.Target``).
        self.publish_targets: dict[str, inbound.Target] = {}
        #: Stores in flight (sends awaiting their durable receipt), for flow control.
        self.pending_stores = 0
        self._held = False
        #: Topic -> this connection's producer on it; (topic, subscription) -> its consumer there.
        self.producers_by_topic: dict[str, Producer] = {}
        self.consumers_by_key: dict[tuple[str, str], MqttConsumer] = {}
        #: Producer and consumer ids, as their topics know them (``producers`` and ``consumers``).
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._ids = 0
        #: Topic Alias -> Topic Name, as the client set them (5.0).
        self.topic_aliases: dict[int, str] = {}
        #: What is being sent to the client (``outbound.py``).
        self.outbound = outbound.Outbound(self)
        self._out: list[bytes] = []
        #: What is written while ``hold_output``'s records are being stored: each record's future
        #: with what came after it (None: nothing was ever held).
        self._holds: deque[tuple[asyncio.Future[None], list[bytes]]] | None = None
        self._flush_scheduled = False
        self._passes: loop_pass.PassScheduler | None = None
        #: Set by a DISCONNECT from the client: its connection ends normally.
        self.disconnected = False
        #: The CONNECT's Last Will, until a DISCONNECT discards it (``will.py``).
        self.will: Will | None = None
        #: The client's credentials as a session to another worker presents them (``access.py``).
        self.relayed = NO_CREDENTIALS
        self._links: Links | None = None

    @property
    def links(self) -> Links:
        """Its sessions to the workers that own topics it uses (``remote.py``), made when first needed."""
        if self._links is None:
            self._links = Links(self)
        return self._links

    # -- TransportCnx, as this connection's consumers and producers see it --------------------
    @property
    def wants_entry_metadata(self) -> bool:
        return False

    def send_command(self, command: wire.BaseCommand) -> None:
        """A Pulsar command for one of its consumers (REACHED_END_OF_TOPIC ...): nothing to say to
        an MQTT client."""

    def write_many(self, frames: list[bytes | memoryview]) -> None:
        """Pulsar frames are never written here: ``MqttConsumer.send_entries`` sends MQTT packets."""
        raise RuntimeError("an MQTT connection takes no Pulsar frames")

    def send_close_consumer(self, consumer_id: int) -> None:
        """The broker closed a consumer (its topic unloaded or deleted, or its follower handed
        back): it goes, and comes back (``subscriptions.closed_by_broker``)."""
        consumer = self.consumers.get(consumer_id)
        if consumer is not None:
            subscriptions.closed_by_broker(self, consumer)

    def forget_consumer(self, consumer_id: int) -> None:
        consumer = self.consumers.get(consumer_id)
        if consumer is not None:
            subscriptions.forget_consumer(self, consumer)

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None:
        """Failover only; no MQTT consumer is on a Failover subscription."""

    def close_producer_by_broker(self, producer_id: int, producer: object) -> None:
        """The broker closed a producer (fencing, a full disk): the next PUBLISH makes a new one."""
        if self.producers.get(producer_id) is producer:
            del self.producers[producer_id]
            for topic, mine in list(self.producers_by_topic.items()):
                if mine is producer:
                    del self.producers_by_topic[topic]
            for name, target in list(self.publish_targets.items()):
                if target.producer is producer:  # nor is its topic (unloaded, perhaps) held here
                    del self.publish_targets[name]

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    # -- the socket ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no asyncio.Transport subclass
        peer = transport.get_extra_info("peername")
        if self.tls_peer is not None:  # relayed by the worker the client's TLS connection is at
            self.remote, self.address = self.tls_peer.remote, self.tls_peer.address
            self.auth.over_tls(self.tls_peer.certificate or None)
        elif peer:
            self.remote = f"{peer[0]}:{peer[1]}"
            self.address = str(peer[0])
        self.over_limit = floods.admit_connection(self, self.address)
        if transport.get_extra_info("sslcontext") is not None:  # mqtts_port
            self.auth.over_tls(transport.get_extra_info("peercert") or None)
        self._since = self.last_heard = asyncio.get_running_loop().time()
        self.server.connections.add(self)
        self._keepalive_slot = self.server.keepalive.add(self)
        if self._replay:  # handed over by the worker it landed on: read from its first byte
            replay, self._replay = self._replay, b""
            self.data_received(replay)

    def data_received(self, data: bytes) -> None:
        if self._raw is not None:
            self._raw.append(data)
        self.decoder.feed(data)
        self.last_heard = asyncio.get_running_loop().time()
        self._handle_packets()

    def _handle_packets(self) -> None:
        debug = log.isEnabledFor(logging.DEBUG)  # asked once a pass, not once a packet
        try:
            while not self.closed and self._waiting is None and not self._held:
                try:
                    packet = self.decoder.next_packet()
                except MqttError as exc:
                    self.refuse(exc)
                    return
                if packet is None:
                    if not self.room.update():  # a large packet begun: it waits for room
                        self._pause_reading()
                    return
                try:
                    if debug:
                        log.debug("%s: %r", self.remote, packet)
                    self._handle(packet)
                except MqttError as exc:
                    self.refuse(exc)
                    return
        finally:
            self.flush_publishes()

    def flush_publishes(self) -> None:
        """Store the PUBLISHes gathered in this pass (``publish_batches.py``): at its end, and
        before anything waits off the loop, so that each topic gets them in order."""
        if self.publishes:
            self.publishes.flush(self.config.max_message_size)

    def connection_lost(self, exc: Exception | None) -> None:
        self.flush_publishes()  # nothing is left gathered after a pass; this is a safeguard
        self.closed = True
        floods.release(self)
        self.room.release()
        if self._keepalive_slot is not None:
            self.server.keepalive.remove(self, self._keepalive_slot)
            self._keepalive_slot = None
        self.server.connections.discard(self)
        if self._waiting is not None:
            self._waiting.cancel()
        subscriptions.drop_all(self)
        if self._links is not None:
            self._links.close()
        self.release_producers()
        if self.session is not None:
            if self.will is not None:
                will.connection_closed(self.server, self.session, self, self.will)
            self.server.sessions.connection_ended(self.session, self)

    def release_producers(self) -> None:
        """Its producers leave their topics (at its end, or at once when it is taken over: the
        connection taking over publishes under the same producer names)."""
        for producer in self.producers.values():
            producer.closed = True
            producer.topic.remove_producer(producer)
        self.producers.clear()
        self.producers_by_topic.clear()
        self.publish_targets.clear()

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for consumer in list(self.consumers.values()):
            consumer.subscription.on_writable(consumer)

    # -- waiting for work off the loop --------------------------------------------------------
    def wait_for(self, future: asyncio.Future[Any], then: Callable[[asyncio.Future[Any]], None]) -> None:
        """Handle nothing more (and read nothing) until ``future`` is done; then ``then(future)``,
        and go on with the packets behind."""
        self._waiting = future
        self._pause_reading()

        def done(finished: asyncio.Future[Any]) -> None:
            if self._waiting is not finished:
                return
            self._waiting = None
            if self.closed:
                return
            try:
                then(finished)
            except MqttError as exc:
                self.refuse(exc)
                return
            except Exception:
                log.exception("%s: handling a packet failed", self.remote)
                self.close_with(R.UNSPECIFIED_ERROR)
                return
            finally:
                self.flush_publishes()
            self._resume()

        future.add_done_callback(done)

    def store_started(self) -> None:
        """A message went to storage: past max_pending_publish_requests_per_connection the socket
        is not read until half of them are stored (TCP then holds the client back)."""
        self.pending_stores += 1
        limit = self.config.max_pending_publish_requests_per_connection
        if limit and self.pending_stores >= limit and not self._held:
            self._held = True
            self._pause_reading()

    def store_done(self) -> None:
        self.pending_stores -= 1
        limit = self.config.max_pending_publish_requests_per_connection
        if self._held and self.pending_stores <= limit // 2:
            self._held = False
            self._resume()

    def _pause_reading(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._waiting is not None or self._held or self.closed:
            return
        self._handle_packets()
        if self._may_read() and self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _may_read(self) -> bool:
        """Nothing waits off the loop and flow control holds nothing back."""
        return self._waiting is None and not self._held and not self.room.waiting

    def hold_for_room(self) -> None:
        """A large packet waits for memory (``packet_room.py``): the socket is not read."""
        self._pause_reading()

    def room_granted(self) -> None:
        self._resume()

    # -- output --------------------------------------------------------------------------------
    def send(self, packet: Packet) -> None:
        """Write ``packet`` with the others of this event-loop pass: without its Reason String and
        User Properties where the client asked for none (Request Problem Information 0) or where
        they would take it past the client's Maximum Packet Size (3.1.2.11.4)."""
        if (
            self.no_problem_information
            and isinstance(packet, _PROBLEM_INFORMATION)
            and packet.properties is not NONE
        ):
            packet = dataclasses.replace(packet, properties=_without_problem_information(packet.properties))
        data = encode(packet, self.version or MQTT_3_1_1)
        if self.client_max_packet and len(data) > self.client_max_packet:
            properties = getattr(packet, "properties", NONE)
            if isinstance(packet, Publish) or properties is NONE:
                log.info(
                    "%s: a %s over the client's Maximum Packet Size is not sent",
                    self.remote,
                    packet.type.name,
                )
                return
            trimmed = _without_problem_information(properties)
            packet = dataclasses.replace(packet, properties=trimmed)  # type: ignore[arg-type]  # it has properties
            data = encode(packet, self.version)
            if len(data) > self.client_max_packet:
                log.info(
                    "%s: a %s over the client's Maximum Packet Size is not sent",
                    self.remote,
                    packet.type.name,
                )
                return
        self.send_bytes(data)

    def received_unanswered(self, qos: int, packet_id: int) -> None:
        """A QoS 1 or 2 PUBLISH came: a 5.0 client past the Receive Maximum announced to it is
        disconnected (0x93, 3.3.4)."""
        unanswered = self.unanswered
        if unanswered is None:
            unanswered = self.unanswered = set()
            self._answers = {}
        key = qos << 16 | packet_id
        unanswered.add(key)
        answers = self._answers
        assert answers is not None
        if key not in answers:
            answers[key] = None
        if self.version == MQTT_5 and len(unanswered) > self.server_receive_maximum:
            raise MqttError(
                R.RECEIVE_MAXIMUM_EXCEEDED,
                f"more than {self.server_receive_maximum} QoS 1 and 2 messages unacknowledged",
            )

    def acknowledge(self, packet_id: int, puback: bytes) -> None:
        """``answered`` then ``send_answer`` for a QoS 1 PUBLISH stored: its PUBACK, in turn."""
        if self.unanswered is not None:
            self.unanswered.discard(1 << 16 | packet_id)
        self.send_answer(1, packet_id, puback)

    def send_answer(self, qos: int, packet_id: int, answer: Packet | bytes) -> None:
        """The PUBACK or PUBREC of a PUBLISH received: sent once those of the PUBLISHes before
        it are."""
        answers = self._answers
        key = qos << 16 | packet_id
        if answers is None or key not in answers:  # answered already (a copy sent again)
            self._send_answer(answer)
            return
        answers[key] = answer
        while answers:
            first = next(iter(answers))
            ready = answers[first]
            if ready is None:
                return
            del answers[first]
            if isinstance(ready, bytes):  # ``_send_answer``, inline: a PUBACK of success
                self.send_bytes(ready)
            else:
                self.send(ready)

    def _send_answer(self, answer: Packet | bytes) -> None:
        if isinstance(answer, bytes):  # a PUBACK of success, encoded already (inbound.py)
            self.send_bytes(answer)
        else:
            self.send(answer)

    def answered(self, qos: int, packet_id: int) -> None:
        """PUBACK (QoS 1) or PUBCOMP, or a refusing PUBREC (QoS 2), went to the client."""
        if self.unanswered is not None:
            self.unanswered.discard(qos << 16 | packet_id)

    def hold_output(self, until: asyncio.Future[None]) -> None:
        """What is sent from now on waits for ``until`` (and any hold before it): a PUBLISH that
        may go only once a record holds its packet identifier, and what follows it, in order."""
        if self._holds is None:
            self._holds = deque()
        self._holds.append((until, []))
        until.add_done_callback(self._release_output)

    def _release_output(self, _: asyncio.Future[None]) -> None:
        holds = self._holds
        assert holds is not None
        released = False
        while holds and holds[0][0].done():
            data = holds.popleft()[1]
            self._out.extend(data)
            released = released or bool(data)
        if released and not self._flush_scheduled:
            self._flush_scheduled = True
            if self._passes is None:
                self._passes = loop_pass.current()
            self._passes.defer(loop_pass.FLUSH, self._flush)

    def send_bytes(self, data: bytes) -> None:
        if self._holds:  # after a PUBLISH waiting for its record: behind it
            self._holds[-1][1].append(data)
            return
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            if self._passes is None:
                self._passes = loop_pass.current()
            self._passes.defer(loop_pass.FLUSH, self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.writelines(out)

    def close(self) -> None:
        """Close after what is written (a DISCONNECT ...) has gone; aborted if the client has not
        taken it within ``CLOSE_DRAIN_S`` (``connection_lost`` then comes all the same)."""
        transport = self.transport
        if transport is not None and not transport.is_closing():
            if self._holds:  # what is held goes first (a DISCONNECT behind it too)
                self._holds[-1][0].add_done_callback(lambda _: self._close_transport(transport))
            else:
                self._close_transport(transport)
        self.closed = True

    def _close_transport(self, transport: asyncio.Transport) -> None:
        if not transport.is_closing():
            self._flush()
            transport.close()
            asyncio.get_running_loop().call_later(CLOSE_DRAIN_S, _abort_unless_lost, self, transport)

    def close_with(self, reason: ReasonCode, message: str | None = None) -> None:
        """End the connection as the standard says for ``reason``: a 5.0 client is told
        (DISCONNECT with the reason code), a 3.1.1 client only sees the connection close."""
        if self.version == MQTT_5 and self.session is not None:
            code = reason if reason in ALLOWED_REASONS[PacketType.DISCONNECT] else R.UNSPECIFIED_ERROR
            properties = Properties(reason_string=message) if message else Properties()
            self.send(Disconnect(code, properties))
        self.close()

    def refuse(self, exc: MqttError) -> None:
        """The client broke the standard: answered with its reason code, then closed; nothing
        else is affected."""
        log.info("%s: %s, closing: %s", self.remote, exc.reason.name, exc)
        if self.session is None:  # during or before CONNECT: answered in CONNACK
            if isinstance(exc, UnsupportedProtocolVersion):
                if exc.level == MQTT_5:
                    self.send_bytes(encode(ConnAck(False, R.UNSUPPORTED_PROTOCOL_VERSION), MQTT_5))
                else:
                    self.send_bytes(
                        encode(ConnAck(False, ConnectReturnCode.UNACCEPTABLE_PROTOCOL_VERSION), MQTT_3_1_1)
                    )
            elif exc.version == MQTT_5 and exc.reason in ALLOWED_REASONS[PacketType.CONNACK]:
                self.send_bytes(encode(ConnAck(False, exc.reason), MQTT_5))
            self.close()
            return
        self.close_with(exc.reason, str(exc))

    # -- keepalive (the MQTT server's wheel, keepalive.py) -------------------------------------
    def keepalive_tick(self, now: float) -> None:
        if self.closed:
            return
        if self.session is None:
            if self.over_limit is not None and now - self._since > floods.REFUSED_WAIT_S:
                self.close()
            elif now - self._since > CONNECT_TIMEOUT_S:
                log.info("%s: no CONNECT within %.0f s, closing", self.remote, CONNECT_TIMEOUT_S)
                self.close()
            return
        # 1.5 times the Keep Alive without a packet: as if the network failed (3.1.2.10).
        if self.keep_alive and now - self.last_heard > 1.5 * self.keep_alive:
            log.info("%s: nothing heard for 1.5 x keep alive (%d s), closing", self.remote, self.keep_alive)
            self.close_with(R.KEEP_ALIVE_TIMEOUT)

    # -- packets -------------------------------------------------------------------------------
    def _handle(self, packet: Packet) -> None:
        kind = type(packet)
        if kind is Publish:  # the packets most sent first, by their exact type
            inbound.handle_publish(self, cast(Publish, packet))
        elif kind is PubAck:
            ack = cast(PubAck, packet)
            self.outbound.acknowledged(ack.packet_id, PacketType.PUBACK, ack.reason_code)
        elif isinstance(packet, Connect):
            if self.session is not None:
                raise MqttError(R.PROTOCOL_ERROR, "a second CONNECT")
            self._connect(packet)
        elif isinstance(packet, Publish):
            inbound.handle_publish(self, packet)
        elif isinstance(packet, PubAck):
            self.outbound.acknowledged(packet.packet_id, PacketType.PUBACK, packet.reason_code)
        elif isinstance(packet, PubRec):
            self.outbound.received(packet)
        elif isinstance(packet, PubComp):
            self.outbound.acknowledged(packet.packet_id, PacketType.PUBCOMP, packet.reason_code)
        elif isinstance(packet, PubRel):
            inbound.handle_pubrel(self, packet)
        elif isinstance(packet, Subscribe):
            subscriptions.handle_subscribe(self, packet)
        elif isinstance(packet, Unsubscribe):
            subscriptions.handle_unsubscribe(self, packet)
        elif isinstance(packet, PingReq):
            self.send(PingResp())
        elif isinstance(packet, Disconnect):
            self._disconnect(packet)
        elif isinstance(packet, Auth):
            access.reauthenticate(self, packet)
        else:
            raise MqttError(R.PROTOCOL_ERROR, f"a client does not send {packet.type.name}")

    def _connect(self, packet: Connect) -> None:
        """CONNECT (3.1): the session it starts or resumes, then CONNACK."""
        self.version = version = packet.protocol_level
        v5 = version == MQTT_5
        properties = packet.properties
        raw, self._raw = self._raw, None
        handoff = self.server.handoff
        if handoff is not None and packet.client_id and not handoff.is_home(packet.client_id):
            # The session lives at another worker: the connection goes there (handoff.py).
            if raw is None or not self._go_home(handoff, packet, b"".join(raw), since=None):
                self._refuse_unreachable_home(v5)
            return
        refusal = self._connect_refusal(packet)
        if refusal is not None:
            code, return_code, why = refusal
            log.info("%s: CONNECT refused: %s", self.remote, why)
            reason = Properties(reason_string=why[:1000]) if v5 else Properties()  # 3.2.2.3.9
            self.send(ConnAck(False, code if v5 else return_code, reason))
            self.close()
            return
        client_id = packet.client_id
        assigned = None
        if not client_id:
            client_id = assigned = f"magnetar-{secrets.token_hex(8)}"
            while handoff is not None and not handoff.is_home(client_id):  # its home is here
                client_id = assigned = f"magnetar-{secrets.token_hex(8)}"
        if v5:
            expiry = properties.session_expiry_interval or 0
            if properties.receive_maximum:
                self.receive_maximum = min(properties.receive_maximum, MAX_INFLIGHT)
            self.client_max_packet = properties.maximum_packet_size or 0
            self.client_alias_maximum = properties.topic_alias_maximum or 0
            self.no_problem_information = properties.request_problem_information == 0
        else:
            expiry = 0 if packet.clean_start else NEVER
        self.keep_alive = packet.keep_alive
        self.will = packet.will
        self.server_receive_maximum = min(
            self.config.max_pending_publish_requests_per_connection or 65535, 65535
        )
        self.decoder.max_packet_size = self.config.mqtt_message_max_length
        session, present, loading = self.server.sessions.open(self, client_id, packet.clean_start, expiry)
        self.session = session

        def answer(done: asyncio.Future[Any]) -> None:
            if not done.cancelled() and done.exception() is not None:
                log.error(
                    "%s: the session of %r cannot be opened: %s", self.remote, client_id, done.exception()
                )
                self.send(
                    ConnAck(False, R.SERVER_UNAVAILABLE if v5 else ConnectReturnCode.SERVER_UNAVAILABLE)
                )
                self.close()
                return
            reply = Properties()
            if v5:
                reply = Properties(
                    assigned_client_identifier=assigned,
                    receive_maximum=self.server_receive_maximum,
                    maximum_packet_size=self.decoder.max_packet_size,
                    topic_alias_maximum=TOPIC_ALIAS_MAXIMUM,
                    authentication_method=self.auth.method if self.auth.supports_refresh else None,
                )
            self.send(ConnAck(present, 0, reply))
            if present:
                self.outbound.resume()
            subscriptions.resume(self)

        self.wait_for(loading, answer)

    def _go_home(self, handoff: Handoff, packet: Connect, data: bytes, since: float | None) -> bool:
        """``_pass_home``, or when the home's queue is full (a burst of CONNECTs), again every
        ``HOME_FULL_RETRY_S``, reading nothing meanwhile, for up to ``HOME_FULL_PATIENCE_S``
        from ``since`` (the first try: None); True once handed over or waiting, False to refuse."""
        loop = asyncio.get_running_loop()
        try:
            return self._pass_home(handoff, packet.client_id, data)
        except HomeFull:
            since = loop.time() if since is None else since
            if loop.time() - since > HOME_FULL_PATIENCE_S:
                log.info("%s: the home worker of %r stayed full", self.remote, packet.client_id)
                return False
        later: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not later.done():  # not cancelled meanwhile
                later.set_result(None)

        loop.call_later(HOME_FULL_RETRY_S, wake)

        def again(_: asyncio.Future[None]) -> None:
            if not self._go_home(handoff, packet, data, since):
                self._refuse_unreachable_home(packet.protocol_level == MQTT_5)

        self.wait_for(later, again)
        return True

    def _refuse_unreachable_home(self, v5: bool) -> None:
        why = "the client id's worker cannot be reached; connect again"
        self.send(
            ConnAck(
                False,
                R.SERVER_UNAVAILABLE if v5 else ConnectReturnCode.SERVER_UNAVAILABLE,
                Properties(reason_string=why) if v5 else Properties(),
            )
        )
        self.close()

    def _pass_home(self, handoff: Handoff, client_id: str, data: bytes) -> bool:
        """Hand this connection to ``client_id``'s home worker: its socket, or for TLS a relay
        of its bytes (relay.py); this worker forgets it. False when that cannot be done."""
        transport = self.transport
        if transport is None:
            return False
        if self.auth.tls:
            peer = TlsPeer(self.remote, self.auth.peer_certificate)
            home = handoff.relay_to_home(client_id, peer, data)
            if home is None:
                return False
            relay.relay(transport, self.remote, home)
            log.info("%s: the TLS connection of %r is relayed to its home worker", self.remote, client_id)
            self.transport = None  # the relay's now
            self.connection_lost(None)  # before any session: only this worker's bookkeeping
            return True
        if not handoff.hand_over(self, client_id, data):
            return False
        self.closed = True
        transport.abort()  # this worker's copy of the socket; the home has its own
        return True

    def _connect_refusal(self, packet: Connect) -> tuple[int, int, str] | None:
        """(5.0 reason, 3.1.1 return code, why) of a CONNECT refused; None when accepted."""
        flooding = floods.connect_refusal(self, self.address, asyncio.get_running_loop().time())
        if flooding is not None:
            return flooding
        if packet.protocol_level == MQTT_3_1_1 and not packet.client_id and not packet.clean_start:
            return 0, ConnectReturnCode.IDENTIFIER_REJECTED, "an empty client id without Clean Session"
        if len(packet.client_id) > MAX_NAME_LENGTH:
            reason = (R.CLIENT_IDENTIFIER_NOT_VALID, ConnectReturnCode.IDENTIFIER_REJECTED)
            return (*reason, f"a client id of more than {MAX_NAME_LENGTH} characters")
        return access.authenticate(self, packet)

    def _disconnect(self, packet: Disconnect) -> None:
        session = self.session
        assert session is not None
        expiry = packet.properties.session_expiry_interval
        if expiry is not None:
            if session.expiry == 0 and expiry:
                raise MqttError(
                    R.PROTOCOL_ERROR, "a Session Expiry Interval set at DISCONNECT after 0 at CONNECT"
                )
            session.expiry = expiry
        if self.version != MQTT_5 or packet.reason_code == R.SUCCESS:
            # Discarded by a normal disconnection (3.14.4, MQTT-3.14.4-3); 0x04 asks for it to
            # be published, and so does an error the client ends with (0x80 and above).
            self.will = None
        self.disconnected = True
        self.close()

    def __repr__(self) -> str:
        client = self.session.client_id if self.session else "?"
        return f"MqttConnection({client!r}, {self.remote})"


def _abort_unless_lost(cnx: MqttConnection, transport: asyncio.Transport) -> None:
    """The client did not take a closed connection's output: the connection ends now."""
    if cnx in cnx.server.connections:  # connection_lost has not come
        log.info("%s: nothing taken %.0f s after the close, aborting", cnx.remote, CLOSE_DRAIN_S)
        transport.abort()
