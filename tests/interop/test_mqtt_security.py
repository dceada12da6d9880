"""MQTT with authentication, authorization and TLS, as on the Pulsar port (docs/mqtt.md,
docs/security.md): a JWT as the password, client certificates on mqtts_port, the standard's
reason codes for what a role may not do, everyone else unaffected. paho-mqtt and gmqtt, 3.1.1
and 5.0, against the real broker process; the official pulsar-client on the Pulsar side."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
import uuid

import pulsar
import pytest

from magnetar.client.admin import AdminClient
from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    MQTT_5,
    Auth,
    Connect,
    Disconnect,
    Properties,
    PubAck,
    Publish,
    PubRec,
    ReasonCode,
    SubAck,
    Subscribe,
    Subscription,
    encode,
)
from magnetar.protocol.mqtt.pulsar_names import pulsar_topic
from magnetar.security import tokens

from ..waiting import eventually
from .conftest import CLIENT_LOGGER
from .mqtt_secure_support import SecurePahoClient, TlsRawClient, client_context
from .mqtt_support import PahoClient, RawClient
from .tls_certs import CLIENT_ROLE, tls_settings

VERSIONS = [pytest.param(MQTT_3_1_1, id="3.1.1"), pytest.param(MQTT_5, id="5.0")]
R = ReasonCode
NOT_AUTHORIZED_3_1_1 = 5


def pulsar_name(mqtt_name: str) -> str:
    return str(pulsar_topic(mqtt_name, "public", "default"))


def unique(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]}"


class Secured:
    """A broker with token authentication (and authorization where asked), MQTT on both ports."""

    def __init__(self, broker_factory, tls_files, authorization: bool, **more: object) -> None:
        self.key = tokens.create_secret_key()
        settings = {
            "mqtt_port": 0,
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(self.key).decode(),
            **more,
        }
        if authorization:
            settings |= {"authorization_enabled": True, "superuser_roles": ["root"]}
        if tls_files is not None:
            settings |= tls_settings(tls_files, mqtts_port=0)
        self.broker = broker_factory(settings)
        self.clients: list[pulsar.Client] = []

    def token(self, role: str, seconds: int = 600) -> str:
        return tokens.create_token(self.key, role, seconds)

    def pulsar(self, role: str = "root") -> pulsar.Client:
        client = pulsar.Client(
            self.broker.service_url,
            authentication=pulsar.AuthenticationToken(self.token(role)),
            operation_timeout_seconds=10,
            logger=CLIENT_LOGGER,
        )
        self.clients.append(client)
        return client

    def admin(self) -> AdminClient:
        return AdminClient(self.broker.http_url, token=self.token("root"))

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture
def secured(broker_factory):
    made: list[Secured] = []

    def make(authorization: bool = False, tls_files=None, **more: object) -> Secured:
        made.append(Secured(broker_factory, tls_files, authorization, **more))
        return made[-1]

    yield make
    for one in made:
        one.close()


# -- authentication -------------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_a_token_as_the_password_connects_and_publishes(secured, version):
    side = secured()
    name = unique("auth/pub")
    consumer = side.pulsar().subscribe(pulsar_name(name), "reader")
    paho = SecurePahoClient(side.broker.mqtt_port, f"car-{version}", version, token=side.token("car-1"))
    try:
        assert paho.connack == 0
        paho.publish(name, b"with a token", 1)
    finally:
        paho.close()
    assert consumer.receive(10_000).data() == b"with a token"
    assert "authenticated as 'car-1' with token" in side.broker.log_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_gmqtt_with_a_token(secured, version):
    import gmqtt

    side = secured()
    name = unique("auth/gmqtt")
    consumer = side.pulsar().subscribe(pulsar_name(name), "reader")

    async def run() -> None:
        mqtt = gmqtt.Client(f"gmqtt-auth-{version}")
        mqtt.set_auth_credentials("anyone", side.token("car-2"))
        await mqtt.connect("127.0.0.1", side.broker.mqtt_port, version=version)
        mqtt.publish(name, b"gmqtt token", qos=1)
        await asyncio.to_thread(lambda: consumer.acknowledge(consumer.receive(10_000)))
        await mqtt.disconnect()

    asyncio.run(run())


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_bad_or_missing_credentials_are_refused_as_mosquitto_refuses_them(secured, version):
    """3.1.1: return code 5 (Not authorized) either way; 5.0: 0x86 for a token refused, 0x87 for
    none. Whoever has a good token is unaffected meanwhile."""
    side = secured()
    port = side.broker.mqtt_port
    good = SecurePahoClient(port, f"good-{version}", version, token=side.token("good"))
    other_key = tokens.create_secret_key()
    expired = tokens.create_token(side.key, "late", -10)
    cases = {
        "wrong key": (tokens.create_token(other_key, "car"), R.BAD_USER_NAME_OR_PASSWORD),
        "not a token": ("hello", R.BAD_USER_NAME_OR_PASSWORD),
        "expired": (expired, R.BAD_USER_NAME_OR_PASSWORD),
        "none": (None, R.NOT_AUTHORIZED),
    }
    try:
        for what, (token, v5_code) in cases.items():
            raw = RawClient(port, version)
            fields = {} if token is None else {"username": "x", "password": token.encode()}
            connack = raw.connect(f"bad-{what}", **fields)
            assert connack.reason_code == (v5_code if version == MQTT_5 else NOT_AUTHORIZED_3_1_1), what
            if version == MQTT_5:
                assert connack.properties.reason_string, what  # says why
            assert raw.closed_after() == [], what
            raw.close()
        refused = SecurePahoClient(port, f"paho-bad-{version}", version, token="not-a-token")
        refused.close()
        # paho reports 3.1.1's return code 5 as its 5.0 twin, 0x87
        assert refused.connack == (R.BAD_USER_NAME_OR_PASSWORD if version == MQTT_5 else R.NOT_AUTHORIZED)
        good.publish(unique("still"), b"fine", 1)
    finally:
        good.close()


@pytest.mark.slow
def test_mqtt5_authentication_method_token_and_reauthentication(secured):
    """5.0's Authentication Method "token" with the token as Authentication Data (MoP's form): the
    CONNACK names the method (4.12.0-5); AUTH Re-authenticate with a fresh token of the same role
    is answered Success; one of another role ends the connection."""
    side = secured()
    port = side.broker.mqtt_port
    raw = RawClient(port, MQTT_5)
    try:
        method = Properties(authentication_method="token", authentication_data=side.token("cam-1").encode())
        connack = raw.connect("cam-1", properties=method)
        assert connack.reason_code == 0
        assert connack.properties.authentication_method == "token"
        fresh_token = side.token("cam-1", 900).encode()
        fresh = Properties(authentication_method="token", authentication_data=fresh_token)
        raw.send(Auth(R.RE_AUTHENTICATE, fresh))
        assert raw.receive() == Auth(R.SUCCESS, Properties(authentication_method="token"))
        raw.send(Publish("cam/still", b"ok", 1, packet_id=1))
        assert raw.receive() == PubAck(1)
        other = Properties(authentication_method="token", authentication_data=side.token("cam-2").encode())
        raw.send(Auth(R.RE_AUTHENTICATE, other))
        (answer,) = raw.closed_after()
        assert isinstance(answer, Disconnect) and answer.reason_code == R.NOT_AUTHORIZED
    finally:
        raw.close()
    raw = RawClient(port, MQTT_5)
    try:  # a method that is not enabled
        connack = raw.connect("cam-3", properties=Properties(authentication_method="SCRAM-SHA-1"))
        assert connack.reason_code == R.BAD_AUTHENTICATION_METHOD
    finally:
        raw.close()
    raw = RawClient(port, MQTT_5)
    try:  # AUTH from a client that connected with a password: a Protocol Error
        assert raw.connect("cam-4", username="u", password=side.token("cam-4").encode()).reason_code == 0
        raw.send(Auth(R.RE_AUTHENTICATE, Properties(authentication_method="token")))
        (answer,) = raw.closed_after()
        assert answer.reason_code == R.PROTOCOL_ERROR
    finally:
        raw.close()


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_a_connection_whose_token_expires_is_closed(secured, version):
    side = secured(authentication_refresh_check_seconds=1)
    raw = RawClient(side.broker.mqtt_port, version)
    try:
        token = side.token("short-lived", 3)
        assert raw.connect("short", username="u", password=token.encode()).reason_code == 0
        started = time.monotonic()
        answers = raw.closed_after(timeout=15)
        if version == MQTT_5:
            assert [type(a) for a in answers] == [Disconnect] and answers[0].reason_code == R.NOT_AUTHORIZED
        else:
            assert answers == []
        assert time.monotonic() - started < 10
    finally:
        raw.close()


# -- authorization ----------------------------------------------------------------------------------
@pytest.fixture
def granted(secured):
    """Authorization on; role ``car`` may produce to ``telemetry/*`` topics named in the grants and
    consume ``alerts/area-1``; nothing else."""
    side = secured(authorization=True)
    admin = side.admin()
    base = unique("city")
    admin.grant_permission(pulsar_name(f"{base}/telemetry"), "car", ["produce"])
    admin.grant_permission(pulsar_name(f"{base}/alerts/area-1"), "car", ["consume"])
    return side, base


def test_publish_without_produce_is_refused_with_the_standards_code(granted):
    """5.0: PUBACK / PUBREC 0x87, the connection goes on; 3.1.1 (no negative acknowledgement):
    closed, as MoP does. Nothing is stored; the allowed topic takes its messages."""
    side, base = granted
    port = side.broker.mqtt_port
    reader = side.pulsar().subscribe(
        [pulsar_name(f"{base}/telemetry"), pulsar_name(f"{base}/other")], "reader"
    )
    raw = RawClient(port, MQTT_5)
    try:
        assert raw.connect("car-5", username="u", password=side.token("car").encode()).reason_code == 0
        raw.send(Publish(f"{base}/other", b"no", 1, packet_id=1))
        answer = raw.receive()
        assert (answer.packet_id, answer.reason_code) == (1, R.NOT_AUTHORIZED)
        assert answer.properties.reason_string == "Client is not authorized to Produce"
        raw.send(Publish(f"{base}/other", b"no", 2, packet_id=2))
        answer = raw.receive()
        assert isinstance(answer, PubRec) and answer.reason_code == R.NOT_AUTHORIZED
        raw.send(Publish(f"{base}/telemetry", b"yes-5", 1, packet_id=3))
        assert raw.receive() == PubAck(3)
    finally:
        raw.close()
    paho = SecurePahoClient(port, "car-311", MQTT_3_1_1, token=side.token("car"))
    try:
        paho.publish(f"{base}/telemetry", b"yes-311", 1)
        raw = RawClient(port, MQTT_3_1_1)
        raw.connect("car-311-raw", username="u", password=side.token("car").encode())
        raw.send(Publish(f"{base}/other", b"no", 1, packet_id=9))
        assert raw.closed_after() == []
        raw.close()
        paho.publish(f"{base}/telemetry", b"still-311", 1)  # another connection of the same role
    finally:
        paho.close()
    got = sorted(reader.receive(10_000).data() for _ in range(3))
    assert got == [b"still-311", b"yes-311", b"yes-5"]
    with pytest.raises(pulsar.Timeout):
        reader.receive(300)


@pytest.mark.parametrize("version", VERSIONS)
def test_subscribe_without_consume_gets_the_failure_code(granted, version):
    side, base = granted
    port = side.broker.mqtt_port
    paho = SecurePahoClient(port, f"sub-{version}", version, token=side.token("car"))
    refused = R.NOT_AUTHORIZED if version == MQTT_5 else 0x80
    try:
        raw = RawClient(port, version)
        raw.connect(f"sub-raw-{version}", username="u", password=side.token("car").encode())
        filters = (f"{base}/alerts/area-1", f"{base}/alerts/area-2", f"{base}/alerts/+")
        raw.send(Subscribe(1, tuple(Subscription(f, 1) for f in filters)))
        assert raw.receive() == SubAck(1, (1, refused, refused))  # a wildcard needs the namespace
        raw.close()
        assert [getattr(c, "value", c) for c in paho.subscribe(f"{base}/alerts/area-1", 1)] == [1]
        producer = side.pulsar().create_producer(pulsar_name(f"{base}/alerts/area-1"))
        producer.send(b"slow down")
        eventually(lambda: paho.received.payloads() == [b"slow down"], what="the alert")
    finally:
        paho.close()


def test_a_namespace_grant_allows_wildcards_and_a_revoke_stops_delivery(granted):
    side, base = granted
    admin = side.admin()
    admin.grant_permission_on_namespace("public/default", "fleet", ["consume"])
    paho = SecurePahoClient(side.broker.mqtt_port, "fleet-1", MQTT_5, token=side.token("fleet"))
    try:
        assert [c.value for c in paho.subscribe(f"{base}/alerts/#", 1)] == [1]
        producer = side.pulsar().create_producer(pulsar_name(f"{base}/alerts/area-9"))
        producer.send(b"one")
        eventually(lambda: paho.received.payloads() == [b"one"], what="the first alert")
        admin.revoke_permissions_on_namespace("public/default", "fleet")
        eventually(lambda: "may not consume from" in side.broker.log_text(), what="the consumer closed")
        producer.send(b"two")
        later = side.pulsar().create_producer(pulsar_name(f"{base}/alerts/area-10"))  # made after
        later.send(b"three")
        side.pulsar().subscribe(pulsar_name(f"{base}/alerts/area-10"), "check")  # loaded: no MQTT consumer
        paho.subscribe(unique("marker"), 0)  # answered after anything sent before it
        assert paho.received.payloads() == [b"one"]
    finally:
        paho.close()


@pytest.mark.slow
# -- TLS: mqtts_port ----------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_mqtts_with_a_token(secured, tls_files, version):
    side = secured(tls_files=tls_files)
    assert side.broker.mqtts_port is not None
    name = unique("tls/pub")
    consumer = side.pulsar().subscribe(pulsar_name(name), "reader")
    context = client_context(tls_files.ca)
    port = side.broker.mqtts_port
    paho = SecurePahoClient(port, f"tls-{version}", version, token=side.token("car"), tls=context)
    try:
        assert paho.connack == 0
        paho.publish(name, b"over TLS", 2)
    finally:
        paho.close()
    assert consumer.receive(10_000).data() == b"over TLS"


@pytest.mark.slow
def test_gmqtt_over_tls(secured, tls_files):
    import gmqtt

    side = secured(tls_files=tls_files)
    name = unique("tls/gmqtt")
    consumer = side.pulsar().subscribe(pulsar_name(name), "reader")

    async def run() -> None:
        mqtt = gmqtt.Client("gmqtt-tls")
        mqtt.set_auth_credentials("x", side.token("car"))
        context = client_context(tls_files.ca)
        await mqtt.connect("127.0.0.1", side.broker.mqtts_port, ssl=context, version=MQTT_5)
        mqtt.publish(name, b"gmqtt over TLS", qos=1)
        await asyncio.to_thread(lambda: consumer.acknowledge(consumer.receive(10_000)))
        await mqtt.disconnect()

    asyncio.run(run())


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_mutual_tls_the_certificate_names_the_role(secured, tls_files, version):
    """The ``tls`` provider: the client certificate's CN is the role (no password); without a
    certificate there is nothing to prove a role; grants apply to the certificate's role."""
    side = secured(authorization=True, tls_files=tls_files, authentication_providers=["token", "tls"])
    side.admin().grant_permission(pulsar_name("cert/ok"), CLIENT_ROLE, ["produce"])
    port = side.broker.mqtts_port
    with_cert = client_context(tls_files.ca, tls_files.client_cert, tls_files.client_key)
    raw = TlsRawClient(port, with_cert, version)
    try:
        assert raw.connect(f"cert-{version}").reason_code == 0
        raw.send(Publish("cert/ok", b"by certificate", 1, packet_id=1))
        assert raw.receive() == PubAck(1)
        raw.send(Publish("cert/not-granted", b"no", 1, packet_id=2))
        if version == MQTT_5:
            assert raw.receive().reason_code == R.NOT_AUTHORIZED
        else:
            assert raw.closed_after() == []
    finally:
        raw.close()
    assert f"authenticated as '{CLIENT_ROLE}' with tls" in side.broker.log_text()
    raw = TlsRawClient(port, client_context(tls_files.ca), version)
    try:
        connack = raw.connect(f"no-cert-{version}")
        assert connack.reason_code == (R.NOT_AUTHORIZED if version == MQTT_5 else NOT_AUTHORIZED_3_1_1)
    finally:
        raw.close()
    reader = side.pulsar().create_reader(pulsar_name("cert/ok"), pulsar.MessageId.earliest)
    assert reader.read_next(10_000).data() == b"by certificate"


@pytest.mark.slow
def test_bad_tls_clients_leave_the_broker_unaffected(secured, tls_files):
    side = secured(tls_files=tls_files)
    name = unique("tls/steady")
    steady = SecurePahoClient(
        side.broker.mqtts_port, "steady", MQTT_5, token=side.token("car"), tls=client_context(tls_files.ca)
    )
    try:
        # plaintext MQTT on the TLS port: no CONNACK, that connection closes
        with socket.create_connection(("127.0.0.1", side.broker.mqtts_port), timeout=15) as plain:
            plain.sendall(encode(Connect("plain", MQTT_5), MQTT_5))
            answer = b""
            while chunk := plain.recv(4096):
                answer += chunk
        assert not answer.startswith(b"\x20")
        # a client trusting another CA refuses the broker's certificate
        with pytest.raises(ssl.SSLError):
            TlsRawClient(side.broker.mqtts_port, client_context(tls_files.wrong_ca))
        # TLS on the plain port
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            TlsRawClient(side.broker.mqtt_port, client_context(tls_files.ca))
        steady.publish(name, b"still here", 1)
    finally:
        steady.close()


@pytest.mark.slow
def test_mqtts_without_tls_settings_does_not_start(broker_factory):
    from magnetar.broker_process import BrokerProcessError

    with pytest.raises(BrokerProcessError) as refused:
        broker_factory({"mqtts_port": 0})
    assert "tls_certificate_file_path" in refused.value.reason


@pytest.mark.slow
def test_plain_mqtt_still_open_without_authentication(broker_factory):
    """Authentication off: any client connects (a password, if sent, is not looked at)."""
    broker = broker_factory({"mqtt_port": 0})
    paho = PahoClient(broker.mqtt_port, "open", MQTT_5)
    try:
        paho.publish("open/topic", b"x", 1)
    finally:
        paho.close()
    raw = RawClient(broker.mqtt_port, MQTT_5)
    try:
        assert raw.connect("pw", username="u", password=b"ignored").reason_code == 0
    finally:
        raw.close()


# -- anchored on Mosquitto -------------------------------------------------------------------------
@pytest.fixture
def closed_mosquitto(tmp_path):
    """Mosquitto that lets nobody in (allow_anonymous false, no password file): its answers to
    missing and wrong credentials."""
    import getpass
    import os
    import shutil
    import subprocess

    binary = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")
    if binary is None:
        pytest.skip("mosquitto is not installed (.ci/system-packages installs it)")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    lines = [f"listener {port} 127.0.0.1", "allow_anonymous false", "persistence false"]
    if os.geteuid() == 0:
        lines.append(f"user {getpass.getuser()}")  # it would switch to the user "mosquitto"
    config = tmp_path / "mosquitto.conf"
    config.write_text("\n".join(lines) + "\n")
    proc = subprocess.Popen([binary, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        eventually(listening, what="mosquitto listening")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow
def test_refused_credentials_are_answered_as_mosquitto_answers_them(secured, closed_mosquitto):
    """3.1.1: return code 5 without credentials and with wrong ones; 5.0 without credentials: 0x87.
    (With a wrong password Mosquitto's 5.0 answer is 0x87 too; ours is MoP's 0x86.)"""
    side = secured()
    cases = [(MQTT_3_1_1, None), (MQTT_3_1_1, b"wrong"), (MQTT_5, None)]
    answers = {}
    for port in (side.broker.mqtt_port, closed_mosquitto):
        for version, password in cases:
            raw = RawClient(port, version)
            fields = {} if password is None else {"username": "u", "password": password}
            answers.setdefault((version, password), []).append(raw.connect("anchor", **fields).reason_code)
            raw.close()
    assert answers == {
        (MQTT_3_1_1, None): [NOT_AUTHORIZED_3_1_1] * 2,
        (MQTT_3_1_1, b"wrong"): [NOT_AUTHORIZED_3_1_1] * 2,
        (MQTT_5, None): [R.NOT_AUTHORIZED] * 2,
    }
