"""MQTT clients with credentials and TLS for the security tests (test_mqtt_security.py): paho-mqtt
with a user name, a password (the token) and a TLS context, and the raw client over TLS."""

from __future__ import annotations

import socket
import ssl
import threading

import paho.mqtt.client as paho

from magnetar.protocol.mqtt import MQTT_5, MqttDecoder

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient, Received


class SecurePahoClient(PahoClient):
    """A paho-mqtt client that connects with a token as its password and/or over TLS; it
    records its CONNACK's reason code, and is connected only if that says Success."""

    def __init__(
        self,
        port: int,
        client_id: str,
        version: int,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        username: str = "device",
        session_expiry: int | None = None,
    ) -> None:
        """``session_expiry``: a 5.0 session that outlives its connection (Clean Start off) by
        this many seconds."""
        protocol = paho.MQTTv5 if version == MQTT_5 else paho.MQTTv311
        self.client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol)
        self.received = Received()
        self.version = version
        self.suback: dict[int, list] = {}
        self.unsuback: set[int] = set()
        self.connack: int | None = None
        self.connected = threading.Event()
        self.client.on_message = self._on_message
        self.client.on_subscribe = lambda c, u, mid, codes, props: self.suback.__setitem__(mid, list(codes))
        self.client.on_unsubscribe = lambda c, u, mid, codes, props: self.unsuback.add(mid)
        self.client.on_connect = self._on_connect
        if token is not None:
            self.client.username_pw_set(username, token)
        if tls is not None:
            self.client.tls_set_context(tls)
        options: dict = {}
        if session_expiry is not None:
            from paho.mqtt.packettypes import PacketTypes
            from paho.mqtt.properties import Properties

            properties = Properties(PacketTypes.CONNECT)
            properties.SessionExpiryInterval = session_expiry
            options = {"clean_start": False, "properties": properties}
        self.client.connect("127.0.0.1", port, keepalive=30, **options)
        self.client.loop_start()
        eventually(lambda: self.connack is not None, what="CONNACK")

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self.connack = reason_code.value
        self.connected.set()

    def close(self) -> None:
        if self.connack == 0:
            self.client.disconnect()
        self.client.loop_stop()


def client_context(ca, cert=None, key=None) -> ssl.SSLContext:
    """A client's TLS context trusting ``ca``, with a client certificate if given."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert), str(key))
    return context


class TlsRawClient(RawClient):
    """The raw client over TLS (mqtts_port)."""

    def __init__(self, port: int, context: ssl.SSLContext, version: int = MQTT_5) -> None:
        plain = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock = context.wrap_socket(plain, server_hostname="localhost")
        self.version = version
        self.decoder = MqttDecoder(version=version)
