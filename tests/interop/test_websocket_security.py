"""The WebSocket API's security against a real broker: ``wss://`` on the HTTPS port with a client
certificate naming the role (the ``tls`` provider), the same through a worker that does not own
the topic (the role passed on sealed), and sessions closed when their token expires, on one
broker and through another worker."""

from __future__ import annotations

import base64
import json
import ssl
import types
import urllib.request
import uuid

import pulsar
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from magnetar.security import tokens
from tests.interop.support import receive_n
from tests.interop.test_websocket import TIMEOUT_S, next_message, payload_of, publish, ws_url
from tests.interop.test_workers import WORKERS
from tests.interop.test_workers_partitioned import PARTITIONS
from tests.interop.tls_certs import CLIENT_ROLE, tls_settings

pytestmark = [pytest.mark.interop, pytest.mark.slow]

#: How long an expired token's session may stay open: the refresh check runs every second here.
EXPIRY_WAIT_S = 20


def secured(tls_files, **more: object) -> tuple[dict, bytes]:
    """Settings: TLS ports, token and certificate authentication, authorization with ``admin`` as
    superuser; and the token key."""
    key = tokens.create_secret_key()
    settings = tls_settings(
        tls_files,
        authentication_enabled=True,
        authentication_providers=["token", "tls"],
        authorization_enabled=True,
        superuser_roles=["admin"],
        token_secret_key="data:;base64," + base64.b64encode(key).decode(),
        **more,
    )
    return settings, key


def grant(http_url: str, admin_token: str, role: str, actions: list[str], ca: str) -> None:
    request = urllib.request.Request(
        f"{http_url}/admin/v2/namespaces/public/default/permissions/{role}",
        data=json.dumps(actions).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {admin_token}"},
    )
    context = ssl.create_default_context(cafile=ca)
    urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context).read()


def wss_url(https_url: str, kind: str, topic: str, *tail: str, **params: object) -> str:
    plain = types.SimpleNamespace(http_url=https_url.replace("https://", "http://", 1))
    return ws_url(plain, kind, topic, *tail, **params).replace("ws://", "wss://", 1)


@pytest.fixture
def admin_client():
    """Official clients with a token (closed after the test)."""
    clients: list[pulsar.Client] = []

    def make(service_url: str, token: str) -> pulsar.Client:
        client = pulsar.Client(service_url, authentication=pulsar.AuthenticationToken(token))
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def client_context(tls_files, certificate: bool = True) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    if certificate:
        context.load_cert_chain(str(tls_files.client_cert), str(tls_files.client_key))
    return context


def test_wss_on_the_https_port_with_the_client_certificates_role(
    broker_factory, admin_client, tls_files, topic
):
    settings, key = secured(tls_files)
    broker = broker_factory(settings)
    admin_token = tokens.create_token(key, "admin", 600)
    grant(broker.https_url, admin_token, CLIENT_ROLE, ["produce"], str(tls_files.ca))
    official = admin_client(broker.service_url, admin_token)
    consumer = official.subscribe(topic, "official")
    with connect(wss_url(broker.https_url, "producer", topic), ssl=client_context(tls_files)) as ws:
        ack = publish(ws, b"over wss, as some-role")
    assert ack["result"] == "ok", ack
    message = receive_n(consumer, 1, ack=True)[0]
    assert message.data() == b"over wss, as some-role"
    assert base64.b64decode(ack["messageId"]) == message.message_id().serialize()
    assert f"authenticated as '{CLIENT_ROLE}' with tls" in broker.log_text()
    # The certificate's role may produce only; no certificate (and no token) is no role at all.
    with pytest.raises(InvalidStatus) as refused:
        connect(wss_url(broker.https_url, "consumer", topic, "s"), ssl=client_context(tls_files))
    assert refused.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as refused:
        connect(
            wss_url(broker.https_url, "producer", topic), ssl=client_context(tls_files, certificate=False)
        )
    assert refused.value.response.status_code == 401


def test_a_client_certificates_role_reaches_the_workers_owning_a_partitioned_topic(
    broker_factory, admin_client, tls_files
):
    """wss:// to one worker's own HTTPS port, on a partitioned topic both workers own: the other
    worker's partitions are served by a session to it that carries the certificate's role sealed,
    and it checks that role's grant itself."""
    settings, key = secured(tls_files, **WORKERS)
    broker = broker_factory(settings)
    admin_token = tokens.create_token(key, "admin", 600)
    grant(broker.https_url, admin_token, CLIENT_ROLE, ["produce"], str(tls_files.ca))
    topic, owners = spread_partitioned(broker, admin_token)
    official = admin_client(broker.service_url, admin_token)
    consumer = official.subscribe(topic, "official", consumer_type=pulsar.ConsumerType.Shared)
    https = owners[0]["httpUrlTls"]
    url = wss_url(https, "producer", topic, messageRoutingMode="RoundRobinPartition")
    with connect(url, ssl=client_context(tls_files)) as ws:
        acks = [publish(ws, f"p{i}".encode()) for i in range(PARTITIONS)]
    assert {a["result"] for a in acks} == {"ok"}, acks
    got = receive_n(consumer, PARTITIONS, ack=True)
    assert {m.message_id().partition() for m in got} == set(range(PARTITIONS))
    assert f"authenticated as '{CLIENT_ROLE}' with magnetar-worker" in broker.log_text()


def lookup(broker, topic: str, token: str) -> dict:
    """Pulsar's HTTP lookup: the owning worker's URLs."""
    path = topic.replace("://", "/", 1)
    request = urllib.request.Request(
        f"{broker.http_url}/lookup/v2/topic/{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as answer:
        return json.loads(answer.read())


def spread_partitioned(broker, token: str) -> tuple[str, list[dict]]:
    """A partitioned topic whose partitions both workers own, and the two owners' lookup data."""
    while True:
        topic = f"persistent://public/default/spread-{uuid.uuid4().hex[:8]}"
        owners = {}
        for i in range(PARTITIONS):
            found = lookup(broker, f"{topic}-partition-{i}", token)
            owners[found["httpUrl"]] = found
        if len(owners) == 2:
            break
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/{topic.replace('://', '/', 1)}/partitions",
        data=str(PARTITIONS).encode(),
        method="PUT",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    urllib.request.urlopen(request, timeout=TIMEOUT_S).read()
    return topic, list(owners.values())


def two_owners(broker, token: str) -> tuple[str, str]:
    """Two topics owned by different workers."""
    by_owner: dict[str, str] = {}
    while len(by_owner) < 2:
        topic = f"persistent://public/default/owned-{uuid.uuid4().hex[:8]}"
        by_owner.setdefault(lookup(broker, topic, token)["httpUrl"], topic)
    first, second = by_owner.values()
    return first, second


def expiring_broker(broker_factory, tls_files, **more: object):
    settings, key = secured(tls_files, authentication_refresh_check_seconds=1, **more)
    return broker_factory(settings), key


def assert_closed_for_expiry(ws, code: int) -> None:
    """The session ends (the close frame is what ``recv`` waits for), with Pulsar's code."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            ws.recv(EXPIRY_WAIT_S)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == code, closed.value


def test_a_session_is_closed_when_its_token_expires(broker_factory, tls_files, topic):
    broker, key = expiring_broker(broker_factory, tls_files)
    short = tokens.create_token(key, "admin", 4)
    with (
        connect(ws_url(broker, "consumer", topic, "s", token=short)) as consumer,
        connect(ws_url(broker, "producer", topic, token=short)) as producer,
    ):
        assert publish(producer, b"before expiry")["result"] == "ok"
        assert payload_of(next_message(consumer)) == b"before expiry"
        assert_closed_for_expiry(producer, 4001)
        assert_closed_for_expiry(consumer, 4002)
    assert "credentials expired" in broker.log_text()


def test_a_session_through_another_worker_is_closed_when_its_token_expires(broker_factory, tls_files):
    """The owner checks the sealed token's expiry itself: its session ends, and with it the
    WebSocket that the other worker serves."""
    broker, key = expiring_broker(broker_factory, tls_files, **WORKERS)
    admin_token = tokens.create_token(key, "admin", 600)
    topic, other = two_owners(broker, admin_token)
    elsewhere = types.SimpleNamespace(http_url=lookup(broker, other, admin_token)["httpUrl"])
    short = tokens.create_token(key, "admin", 4)
    with connect(ws_url(elsewhere, "producer", topic, token=short)) as producer:
        assert publish(producer, b"before expiry")["result"] == "ok"
        assert_closed_for_expiry(producer, 4001)
    log = broker.log_text()
    assert "with magnetar-worker" in log and "credentials expired" in log
