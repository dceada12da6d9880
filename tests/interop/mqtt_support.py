"""MQTT clients for the interop tests: paho-mqtt and gmqtt (two independent codecs), and a raw
socket client speaking our codec, for what well-behaved clients never send."""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field

import paho.mqtt.client as paho

from magnetar.protocol.mqtt import MQTT_5, Connect, MqttDecoder, Packet, encode

from ..waiting import eventually


@dataclass
class Received:
    """What a client's subscriptions delivered: (topic, payload, qos, user properties, retain),
    and each message's MQTT 5 properties (paho's, by name) in ``properties``."""

    messages: list[tuple[str, bytes, int, tuple[tuple[str, str], ...], bool]] = field(default_factory=list)
    properties: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        properties: tuple[tuple[str, str], ...],
        retain: bool = False,
        all_properties: dict | None = None,
    ) -> None:
        with self.lock:
            self.messages.append((topic, payload, qos, properties, retain))
            self.properties.append(all_properties or {})

    def payloads(self) -> list[bytes]:
        with self.lock:
            return [m[1] for m in self.messages]


class PahoClient:
    """A connected paho-mqtt client with its network loop on a thread."""

    def __init__(
        self,
        port: int,
        client_id: str,
        version: int,
        clean: bool = True,
        session_expiry: int | None = None,
        will: tuple | None = None,
    ) -> None:
        """``clean``: Clean Session (3.1.1) or Clean Start (5.0); ``session_expiry``: 5.0's Session
        Expiry Interval; ``will``: (topic, payload, qos, retain[, 5.0 will properties])."""
        protocol = paho.MQTTv5 if version == MQTT_5 else paho.MQTTv311
        kwargs = {} if version == MQTT_5 else {"clean_session": clean}
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol, **kwargs
        )
        self.received = Received()
        self.version = version
        self.session_present: bool | None = None
        self.client.on_message = self._on_message
        self.client.on_connect = self._on_connect
        self.suback: dict[int, list] = {}
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.suback.__setitem__(mid, list(codes))
        self.unsuback: set[int] = set()
        self.client.on_unsubscribe = lambda c, u, mid, codes, props: self.unsuback.add(mid)
        if will is not None:
            self.client.will_set(*will)
        connect_options: dict = {}
        if version == MQTT_5:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            connect_options["clean_start"] = clean
            if session_expiry is not None:
                properties = Properties(PacketTypes.CONNECT)
                properties.SessionExpiryInterval = session_expiry
                connect_options["properties"] = properties
        self._connect_options = connect_options
        self.client.connect("127.0.0.1", port, keepalive=30, **connect_options)
        self.client.loop_start()
        eventually(self.client.is_connected, what="paho connected")

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self.session_present = bool(flags.session_present)

    def _on_message(self, client, userdata, message) -> None:
        properties = getattr(message.properties, "UserProperty", None) or []
        every = message.properties.json() if getattr(message, "properties", None) is not None else {}
        self.received.add(
            message.topic, message.payload, message.qos, tuple(properties), bool(message.retain), every
        )

    def subscribe(self, topic_filter: str, qos: int, **options) -> list:
        """SUBSCRIBE; 5.0 ``options`` (paho's SubscribeOptions: noLocal, retainAsPublished,
        retainHandling) and ``subscription_id``."""
        properties = None
        if self.version == MQTT_5:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties
            from paho.mqtt.subscribeoptions import SubscribeOptions

            subscription_id = options.pop("subscription_id", None)
            if subscription_id is not None:
                properties = Properties(PacketTypes.SUBSCRIBE)
                properties.SubscriptionIdentifier = subscription_id
            result, mid = self.client.subscribe(
                topic_filter, options=SubscribeOptions(qos=qos, **options), properties=properties
            )
        else:
            result, mid = self.client.subscribe(topic_filter, qos=qos)
        assert result == paho.MQTT_ERR_SUCCESS
        return eventually(lambda: self.suback.get(mid), what=f"SUBACK of {topic_filter}")

    def unsubscribe(self, topic_filter: str) -> None:
        result, mid = self.client.unsubscribe(topic_filter)
        assert result == paho.MQTT_ERR_SUCCESS
        eventually(lambda: mid in self.unsuback, what=f"UNSUBACK of {topic_filter}")

    def publish(
        self,
        topic: str,
        payload: bytes,
        qos: int,
        user_properties: list[tuple[str, str]] | None = None,
        retain: bool = False,
        **properties_by_name,
    ) -> None:
        """PUBLISH and wait for its acknowledgement; 5.0 properties by paho's names
        (``ContentType=...``)."""
        properties = None
        if user_properties or properties_by_name:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = Properties(PacketTypes.PUBLISH)
            if user_properties:
                properties.UserProperty = user_properties
            for name, value in properties_by_name.items():
                setattr(properties, name, value)
        info = self.client.publish(topic, payload, qos=qos, retain=retain, properties=properties)
        info.wait_for_publish(10)
        assert info.is_published()

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def drop(self) -> None:
        """Lose the connection without a DISCONNECT (as a network failure would)."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()

    def reconnect(self, port: int) -> None:
        """Connect again as at first, to ``port`` (a broker restarted on another one), with what
        paho keeps of a session that is not clean: its QoS 2 messages waiting for their PUBREL."""
        self.client.loop_stop()
        self.session_present = None
        self.client.connect("127.0.0.1", port, keepalive=30, **self._connect_options)
        self.client.loop_start()
        eventually(lambda: self.session_present is not None, what="paho connected again")


class RawClient:
    """One TCP connection speaking our codec, packet by packet."""

    def __init__(self, port: int, version: int = MQTT_5) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.version = version
        self.decoder = MqttDecoder(version=version)

    def send(self, packet: Packet) -> None:
        self.sock.sendall(encode(packet, self.version))

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def connect(self, client_id: str, clean: bool = True, **fields) -> Packet:
        self.send(Connect(client_id, self.version, clean, **fields))
        return self.receive()

    def receive(self, timeout: float = 10) -> Packet:
        deadline = time.monotonic() + timeout
        while (packet := self.decoder.next_packet()) is None:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.decoder.feed(data)
        return packet

    def closed_after(self, timeout: float = 10) -> list[Packet]:
        """Every packet the broker sends until it closes the connection (it must close it)."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                out.append(self.receive(max(0.01, deadline - time.monotonic())))
            except (ConnectionError, ConnectionResetError):
                return out

    def close(self) -> None:
        self.sock.close()
