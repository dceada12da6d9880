"""The spread (docs/architecture.md) with authentication on, and with the TLS Pulsar port alone,
with the official client against ``--workers 2``: a follower's link CONNECTs to the owner as its
worker (the workers' sealed identity), which the owner serves for the link only; each consumer is
still authenticated and authorized by the worker it connects to."""

from __future__ import annotations

import base64
import json
import re
import urllib.request
import uuid

import pulsar
import pytest

from magnetar.broker.follower_topic import MQTT_SUBSCRIBERS
from magnetar.broker.handlers.worker_access import ROLE_PROPERTY, away_consumer_name
from magnetar.broker.worker_credentials import AUTH_METHOD, SECRET_FILE, Relayed, WorkerSecret, identity
from magnetar.protocol import wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE
from magnetar.security import tokens

from ..waiting import eventually
from .conftest import CLIENT_LOGGER
from .support import RawConnection, receive_n
from .test_broadcast import BROADCAST
from .test_broadcast_spread import LINK, own_ports
from .test_workers import WORKERS
from .tls_certs import tls_settings

pytestmark = [pytest.mark.interop, pytest.mark.slow]

T = wire.BaseCommand
SERVING_TLS = re.compile(r"worker-\d+ \(pid \d+\) serving on .*\(TLS: pulsar\+ssl://")


class Secured:
    """A broker of two workers with token authentication and authorization (``admin`` superuser,
    ``vehicle`` granted consume on public/default)."""

    def __init__(self, broker_factory) -> None:
        self.key = tokens.create_secret_key()
        self.broker = broker_factory(
            {
                **WORKERS,
                "authentication_enabled": True,
                "token_secret_key": "data:;base64," + base64.b64encode(self.key).decode(),
                "authorization_enabled": True,
                "superuser_roles": ["admin"],
            }
        )
        self.clients: list[pulsar.Client] = []
        grant = urllib.request.Request(
            f"{self.broker.http_url}/admin/v2/namespaces/public/default/permissions/vehicle",
            data=json.dumps(["consume"]).encode(),
            method="POST",
            headers={"Content-Type": "application/json", **self.bearer("admin")},
        )
        urllib.request.urlopen(grant, timeout=10).read()

    def token(self, role: str) -> str:
        return tokens.create_token(self.key, role, 600)

    def bearer(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(role)}"}

    def client(self, role: str) -> pulsar.Client:
        client = pulsar.Client(
            self.broker.service_url,
            authentication=pulsar.AuthenticationToken(self.token(role)),
            operation_timeout_seconds=10,
            logger=CLIENT_LOGGER,
        )
        self.clients.append(client)
        return client

    def owner_stats(self, topic: str) -> dict:
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
        request = urllib.request.Request(self.broker.http_url + path, headers=self.bearer("admin"))
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)

    def close(self) -> None:
        for client in self.clients:
            client.close()


@pytest.fixture
def secured(broker_factory):
    side = Secured(broker_factory)
    yield side
    side.close()


def subscribe(client: pulsar.Client, topic: str, name: str) -> pulsar.Consumer:
    return client.subscribe(
        topic, "fans", consumer_type=pulsar.ConsumerType.Exclusive, consumer_name=name, properties=BROADCAST
    )


def on_a_follower(make_client, stats, topic: str, name: str) -> pulsar.Consumer:
    """A broadcast consumer ``name`` (a client of its own each try) that a follower serves: the
    topic's stats list it served by another worker than the owner, and list no link."""
    for _ in range(40):
        consumer = subscribe(make_client(), topic, name)
        answer = stats(topic)
        consumers = answer["subscriptions"]["fans"]["consumers"]
        assert not any(c["consumerName"].startswith(LINK) for c in consumers), consumers
        if any(c["consumerName"] == name and c["worker"] != answer["ownerBroker"] for c in consumers):
            return consumer
        consumer.close()
    raise AssertionError(f"no connection of 40 reached a follower of {topic}")


def raw_connect(port: int, method: str, data: bytes) -> tuple[RawConnection, wire.BaseCommand]:
    """A raw connection to ``port`` that CONNECTed with ``method``; the broker's first answer."""
    raw = RawConnection(port)
    raw.send_command(
        wire.CommandConnect(
            client_version="magnetar-interop-raw",
            protocol_version=20,
            auth_method_name=method,
            auth_data=data,
        )
    )
    frame = raw.recv_frame()
    assert frame is not None
    return raw, frame


def test_with_token_authentication_a_followers_consumers_are_served_and_checked_there(secured):
    topic = f"persistent://public/default/secured-{uuid.uuid4().hex[:8]}"
    first = subscribe(secured.client("vehicle"), topic, "first")  # at the owner: the topic is spread
    there = on_a_follower(lambda: secured.client("vehicle"), secured.owner_stats, topic, "vehicle")
    producer = secured.client("admin").create_producer(topic, batching_enabled=False)
    sent = [f"alert-{i}".encode() for i in range(10)]
    for payload in sent:
        producer.send(payload)
    for consumer in (first, there):
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent
    # The link acknowledged what the follower's consumer did: the owner's stored cursor moved on.
    eventually(lambda: secured.owner_stats(topic)["subscriptions"]["fans"]["msgBacklog"] == 0)

    # Each consumer is checked by the worker it connects to: at every worker's own port (the
    # follower's included), a role without the grant is refused, a bad token too.
    for port in own_ports(secured.broker).values():
        raw, answer = raw_connect(port, "token", secured.token("stranger").encode())
        try:
            assert answer.type == T.CONNECTED
            subscribe_cmd = wire.CommandSubscribe(
                topic=topic,
                subscription="fans",
                sub_type=wire.CommandSubscribe.Exclusive,
                consumer_id=1,
                request_id=1,
            )
            subscribe_cmd.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
            raw.send_command(subscribe_cmd)
            refused = raw.expect(T.ERROR).body()
            assert refused.error == wire.AuthorizationError, refused
        finally:
            raw.close()
        raw, answer = raw_connect(port, "token", b"not-a-token")
        raw.close()
        assert answer.type == T.ERROR and answer.body().error == wire.AuthenticationError


def test_a_workers_identity_is_served_for_the_link_only(secured):
    topic = f"persistent://public/default/identity-{uuid.uuid4().hex[:8]}"
    # Asked before the topic is spread: then the HTTP lookup names the owner's own port.
    path = "/lookup/v2/topic/" + topic.replace("://", "/", 1)
    request = urllib.request.Request(secured.broker.http_url + path, headers=secured.bearer("admin"))
    with urllib.request.urlopen(request, timeout=10) as answer:
        port = int(json.load(answer)["brokerUrl"].rsplit(":", 1)[1])  # the owner's own port
    subscribe(secured.client("vehicle"), topic, "first")
    on_a_follower(lambda: secured.client("vehicle"), secured.owner_stats, topic, "vehicle")
    secret = WorkerSecret(secured.broker.data_dir)
    assert (secured.broker.data_dir / SECRET_FILE).exists()

    # Sealed with the workers' secret: connected, and a link's SUBSCRIBE is served ...
    raw, answer = raw_connect(port, AUTH_METHOD, secret.seal(identity("worker-7")))
    try:
        assert answer.type == T.CONNECTED
        link = wire.CommandSubscribe(
            topic=topic,
            subscription="fans",
            sub_type=wire.CommandSubscribe.Exclusive,
            consumer_id=1,
            request_id=1,
            consumer_name=f"{LINK}worker-7",
            durable=True,
        )
        link.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
        raw.send_command(link)
        raw.expect(T.SUCCESS)
        # ... and one of MQTT's non-durable broadcast subscription (its MQTT clients follow the
        # topic), but no other non-durable one ...
        for consumer_id, subscription, answer in ((3, MQTT_SUBSCRIBERS, T.SUCCESS), (4, "fans-nd", T.ERROR)):
            mqtt_link = wire.CommandSubscribe(
                topic=topic,
                subscription=subscription,
                sub_type=wire.CommandSubscribe.Exclusive,
                consumer_id=consumer_id,
                request_id=10 + consumer_id,
                consumer_name=f"{LINK}worker-7",
                durable=False,
            )
            mqtt_link.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
            raw.send_command(mqtt_link)
            reply = raw.expect(answer)
            assert answer == T.SUCCESS or reply.body().error == wire.AuthorizationError
        # ... but nothing a client would ask: a producer, another consumer, a lookup.
        raw.send_command(wire.CommandProducer(topic=topic, producer_id=1, request_id=2))
        assert raw.expect(T.ERROR).body().error == wire.AuthorizationError
        other = wire.CommandSubscribe(
            topic=topic,
            subscription="mine",
            sub_type=wire.CommandSubscribe.Exclusive,
            consumer_id=2,
            request_id=3,
            consumer_name="reader",
            durable=True,
        )
        raw.send_command(other)
        assert raw.expect(T.ERROR).body().error == wire.AuthorizationError
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=4))
        lookup = raw.expect(T.LOOKUP_RESPONSE).body()
        assert lookup.response == wire.CommandLookupTopicResponse.Failed
        assert lookup.error == wire.AuthorizationError
    finally:
        raw.close()

    # Not sealed with this broker's secret (a client making up an identity): refused.
    forged = WorkerSecret(secured.broker.data_dir.parent)  # another directory: another secret
    raw, answer = raw_connect(port, AUTH_METHOD, forged.seal(identity("worker-0")))
    raw.close()
    assert answer.type == T.ERROR and answer.body().error == wire.AuthenticationError
    # A token role named like a worker is a client like any other: no link for it.
    raw, answer = raw_connect(
        port, AUTH_METHOD, secret.seal(Relayed("token", secured.token("worker-0").encode()))
    )
    try:
        assert answer.type == T.CONNECTED
        raw.send_command(wire.CommandProducer(topic=topic, producer_id=1, request_id=2))
        assert raw.expect(T.ERROR).body().error == wire.AuthorizationError  # no grant to produce
    finally:
        raw.close()


def test_a_workers_identity_makes_an_away_mqtt_sessions_subscription_only_where_its_role_may_consume(
    secured,
):
    """A home worker makes an away MQTT session's durable subscription at the owner as itself
    (``mqtt/remote.py``, ``make_subscriptions``), carrying the session's role: the owner makes it
    only where that role may consume the topic, and only as the asking worker, on a topic there."""
    topic = f"persistent://public/default/away-{uuid.uuid4().hex[:8]}"
    secured.client("admin").create_producer(topic)  # it exists: the SUBSCRIBE creates no topic
    path = "/lookup/v2/topic/" + topic.replace("://", "/", 1)
    request = urllib.request.Request(secured.broker.http_url + path, headers=secured.bearer("admin"))
    with urllib.request.urlopen(request, timeout=10) as answer:
        port = int(json.load(answer)["brokerUrl"].rsplit(":", 1)[1])  # the owner's own port
    secret = WorkerSecret(secured.broker.data_dir)
    raw, answer = raw_connect(port, AUTH_METHOD, secret.seal(identity("worker-7")))
    ids = iter(range(1, 100))

    def away(subscription: str, role: str | None, worker: str = "worker-7", **more) -> wire.CommandSubscribe:
        request_id = next(ids)
        cmd = wire.CommandSubscribe(
            topic=topic,
            subscription=subscription,
            sub_type=wire.CommandSubscribe.Exclusive,
            consumer_id=request_id,
            request_id=request_id,
            consumer_name=away_consumer_name(worker),
            durable=True,
            **({"force_topic_creation": False} | more),  # its default is True
        )
        if role is not None:
            cmd.metadata.add(key=ROLE_PROPERTY, value=role)
        raw.send_command(cmd)
        return cmd

    try:
        assert answer.type == T.CONNECTED
        made = away("car-1", "vehicle")  # granted consume on public/default
        raw.expect(T.SUCCESS)
        raw.send_command(wire.CommandCloseConsumer(consumer_id=made.consumer_id, request_id=50))
        raw.expect(T.SUCCESS)
        away("car-2", "stranger")  # no grant
        refusal = raw.expect(T.ERROR).body()
        assert refusal.error == wire.AuthorizationError
        assert "role 'stranger' of the session is not authorized to consume" in refusal.message
        for subscription, role, more in (
            ("car-3", None, {}),  # no role named
            ("car-4", "vehicle", {"worker": "worker-0"}),  # another worker's name
            ("car-5", "vehicle", {"force_topic_creation": True}),  # it would create the topic
        ):
            away(subscription, role, **more)
            assert raw.expect(T.ERROR).body().error == wire.AuthorizationError, subscription
    finally:
        raw.close()
    assert set(secured.owner_stats(topic)["subscriptions"]) == {"car-1"}


def test_the_spread_with_the_tls_pulsar_port_only(broker_factory, tls_files):
    broker = broker_factory(tls_settings(tls_files, broker_service_port_enabled=False, **WORKERS))
    assert broker.port is None
    assert len(SERVING_TLS.findall(broker.log_text())) == 2, broker.log_text()

    def make() -> pulsar.Client:
        client = pulsar.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(tls_files.ca),
            operation_timeout_seconds=10,
            logger=CLIENT_LOGGER,
        )
        made.append(client)
        return client

    def stats(topic: str) -> dict:
        path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
        with urllib.request.urlopen(broker.http_url + path, timeout=10) as answer:
            return json.load(answer)

    made: list[pulsar.Client] = []
    try:
        topic = f"persistent://public/default/tls-only-{uuid.uuid4().hex[:8]}"
        first = subscribe(make(), topic, "first")
        there = on_a_follower(make, stats, topic, "vehicle")
        producer = make().create_producer(topic, batching_enabled=False)
        sent = [f"alert-{i}".encode() for i in range(10)]
        for payload in sent:
            producer.send(payload)
        for consumer in (first, there):
            assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent
        eventually(lambda: stats(topic)["subscriptions"]["fans"]["msgBacklog"] == 0)
    finally:
        for client in made:
            client.close()
