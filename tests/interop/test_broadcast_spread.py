"""One topic's broadcast fan-out on every worker (docs/architecture.md, the spread), with the
official client against ``--workers 2``: the consumers of one topic's broadcast subscription are
served by the worker their connection reached, each getting every message once and in order;
LOOKUPs of the topic name the shared port; a producer (or any consumer but a durable broadcast one)
on a worker that does not own the topic is sent on to the owner."""

from __future__ import annotations

import json
import re
import urllib.request
import uuid

import pulsar
import pytest

from magnetar.client import Client, ConsumerType, Timeout
from magnetar.protocol import wire

from ..waiting import eventually
from .support import RawConnection, receive_n
from .test_broadcast import BROADCAST
from .test_workers import WORKERS

pytestmark = pytest.mark.interop

SERVING = re.compile(r"(worker-\d+) \(pid \d+\) serving on pulsar://[^:\s]+:(\d+)")
LINK = "magnetar.spread."
T = wire.BaseCommand
REDIRECT = wire.CommandLookupTopicResponse.Redirect


def own_ports(broker) -> dict[str, int]:
    """Each live worker's own pulsar:// port, by its name (the last ``serving on`` line of each)."""
    return {name: int(port) for name, port in SERVING.findall(broker.log_text())}


def owner_stats(broker, topic: str) -> dict:
    """The topic's stats as its owner has them (the admin port proxies to the owner)."""
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    with urllib.request.urlopen(broker.http_url + path, timeout=10) as answer:
        return json.load(answer)


def consumer_names(broker, topic: str, subscription: str) -> list[str]:
    return [c["consumerName"] for c in owner_stats(broker, topic)["subscriptions"][subscription]["consumers"]]


def served(broker, topic: str, subscription: str) -> tuple[set[str], set[str]]:
    """The names of ``subscription``'s consumers served by the topic's owner, and by the other
    workers, as the topic's stats list them (each consumer with the ``worker`` serving it)."""
    stats = owner_stats(broker, topic)
    consumers = stats["subscriptions"][subscription]["consumers"]
    owner = stats["ownerBroker"]
    assert not any(c["consumerName"].startswith(LINK) for c in consumers), consumers  # no link listed
    return (
        {c["consumerName"] for c in consumers if c["worker"] == owner},
        {c["consumerName"] for c in consumers if c["worker"] != owner},
    )


def spread_topic(broker, client_factory, prefix: str = "alerts") -> tuple[str, object]:
    """A topic made spread: its first broadcast consumer is at its owner; then every worker's
    LOOKUP names the shared port. Returns the topic and that first consumer."""
    topic = f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:8]}"
    first = client_factory(broker.service_url).subscribe(
        topic,
        "fans",
        consumer_type=pulsar.ConsumerType.Exclusive,
        consumer_name="first",
        properties=BROADCAST,
    )
    ports = own_ports(broker).values()
    eventually(
        lambda: all(lookup_at(port, topic).response == REDIRECT for port in ports),
        what="every worker's LOOKUP naming the shared port",
    )
    return topic, first


def lookup_at(port: int, topic: str, authoritative: bool = False) -> wire.CommandLookupTopicResponse:
    """The LOOKUP answer of the worker listening on its own ``port``."""
    raw = RawConnection(port)
    try:
        raw.handshake()
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=1, authoritative=authoritative))
        return raw.expect(T.LOOKUP_RESPONSE).body()
    finally:
        raw.close()


def test_one_topics_broadcast_consumers_are_served_by_both_workers(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, first = spread_topic(broker, client_factory)
    consumers = {"first": first}

    def on_both() -> bool:
        at_owner, elsewhere = served(broker, topic, "fans")
        return bool(elsewhere) and len(at_owner) > 1

    # Each consumer has its own client, so its own connection to the shared port.
    while not on_both():
        assert len(consumers) < 40, consumer_names(broker, topic, "fans")
        name = f"vehicle-{len(consumers)}"
        consumers[name] = client_factory(broker.service_url).subscribe(
            topic,
            "fans",
            consumer_type=pulsar.ConsumerType.Exclusive,
            consumer_name=name,
            properties=BROADCAST,
        )
    # Producers on clients of their own: those whose connection reached the other worker are
    # refused there and sent on to the owner, without an error to the application.
    producers = [
        client_factory(broker.service_url).create_producer(topic, batching_enabled=False) for _ in range(8)
    ]
    sent = []
    for i in range(40):
        payload = f"alert-{i}".encode()
        producers[i % len(producers)].send(payload)
        sent.append(payload)
    for name, consumer in consumers.items():
        got = [m.data() for m in receive_n(consumer, len(sent), ack=True)]
        assert got == sent, name
        with pytest.raises(pulsar.Timeout):
            consumer.receive(200)  # each message once
    # The owner's stored cursor follows every worker's consumers: everything acknowledged.
    eventually(lambda: owner_stats(broker, topic)["subscriptions"]["fans"]["msgBacklog"] == 0)


def test_a_follower_serves_durable_broadcast_consumers_and_sends_the_rest_to_the_owner(
    broker_factory, client_factory
):
    broker = broker_factory(WORKERS)
    topic, _ = spread_topic(broker, client_factory)
    host = broker.service_url.rsplit(":", 1)[0]
    ports = own_ports(broker)
    owner_name = _owner_of(broker, topic, ports)
    follower_port = next(port for name, port in ports.items() if name != owner_name)
    owner_port = ports[owner_name]

    raw = RawConnection(follower_port)
    try:
        raw.handshake()
        # A LOOKUP redirects to the shared port, where (authoritative) it is answered Connect.
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=1))
        answer = raw.expect(T.LOOKUP_RESPONSE).body()
        assert answer.response == wire.CommandLookupTopicResponse.Redirect and answer.authoritative
        assert answer.broker_service_url == broker.service_url
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=2, authoritative=True))
        answer = raw.expect(T.LOOKUP_RESPONSE).body()
        assert answer.response == wire.CommandLookupTopicResponse.Connect
        assert answer.broker_service_url == broker.service_url
        # A durable broadcast consumer is served here.
        raw.subscribe(
            topic,
            "fans",
            wire.CommandSubscribe.Exclusive,
            consumer_id=10,
            permits=100,
            consumer_name="raw-vehicle",
            metadata=[wire.KeyValue(key=k, value=v) for k, v in BROADCAST.items()],
        )
        # A producer is not: ServiceNotReady, and from now on this connection's LOOKUPs of the
        # topic name the owner, where the client's retry goes.
        raw.send_command(wire.CommandProducer(topic=topic, producer_id=1, request_id=20))
        refused = raw.expect(T.ERROR).body()
        assert refused.error == wire.ServiceNotReady and "redo the lookup" in refused.message
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=21, authoritative=True))
        answer = raw.expect(T.LOOKUP_RESPONSE).body()
        assert answer.response == wire.CommandLookupTopicResponse.Connect
        assert answer.broker_service_url == f"{host}:{owner_port}"
        # Nor is a consumer of another kind.
        raw.send_command(
            wire.CommandSubscribe(
                topic=topic,
                subscription="plain",
                sub_type=wire.CommandSubscribe.Shared,
                consumer_id=11,
                request_id=22,
            )
        )
        assert raw.expect(T.ERROR).body().error == wire.ServiceNotReady
        # Then a CLOSE_CONSUMER: the official client retries a consumer refused so only then.
        assert raw.expect(T.CLOSE_CONSUMER).body().consumer_id == 11
        # The broadcast consumer here gets what the owner stores.
        producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
        producer.send(b"road-works")
        message = raw.expect(T.MESSAGE)
        assert message.body().consumer_id == 10 and bytes(message.payload).endswith(b"road-works")
    finally:
        raw.close()


def _owner_of(broker, topic: str, ports: dict[str, int]) -> str:
    """The name of the worker that owns the spread ``topic``: a worker's LOOKUP of it names the
    shared port, until something only the owner serves (a PRODUCER) is refused on the connection;
    then the connection's LOOKUP names the owner's own port."""
    port = next(iter(ports.values()))
    raw = RawConnection(port)
    try:
        raw.handshake()
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=1, authoritative=True))
        assert raw.expect(T.LOOKUP_RESPONSE).body().broker_service_url == broker.service_url
        raw.send_command(wire.CommandProducer(topic=topic, producer_id=1, request_id=2))
        answer = raw.recv_frame()
        assert answer is not None and answer.type in (T.PRODUCER_SUCCESS, T.ERROR), answer
        if answer.type == T.ERROR:
            raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=3, authoritative=True))
            port = int(raw.expect(T.LOOKUP_RESPONSE).body().broker_service_url.rsplit(":", 1)[1])
    finally:
        raw.close()
    return next(name for name, p in ports.items() if p == port)


def test_our_client_follows_the_spread_as_the_official_one_does(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, _ = spread_topic(broker, client_factory)
    clients = [Client(broker.service_url) for _ in range(10)]  # a connection each: either worker
    try:
        consumers = [
            c.subscribe(topic, "fans", consumer_type=ConsumerType.Broadcast, consumer_name=f"ours-{i}")
            for i, c in enumerate(clients[:6])
        ]
        producers = [c.create_producer(topic) for c in clients[6:]]
        # Shared consumers too: one refused on the follower (then closed) subscribes at the owner.
        shared = [c.subscribe(topic, "plain", consumer_type=ConsumerType.Shared) for c in clients[6:]]
        sent = [f"ours-{i}".encode() for i in range(20)]
        for i, payload in enumerate(sent):
            producers[i % len(producers)].send(payload)
        for consumer in consumers:
            got = []
            for _ in sent:
                message = consumer.receive(10_000)
                consumer.acknowledge(message)
                got.append(message.data())
            assert got == sent
        got: list[bytes] = []
        for _ in range(100):  # rounds of at most 0.4 s
            if len(got) == len(sent):
                break
            for consumer in shared:
                try:
                    message = consumer.receive(100)
                except Timeout:
                    continue
                consumer.acknowledge(message)
                got.append(message.data())
        assert sorted(got) == sorted(sent)
    finally:
        for c in clients:
            c.close()


def test_a_followers_consumer_asks_its_last_message_id(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topic, _ = spread_topic(broker, client_factory)
    ports = own_ports(broker)
    owner = _owner_of(broker, topic, ports)
    follower_port = next(port for name, port in ports.items() if name != owner)
    producer = client_factory(broker.service_url).create_producer(topic, batching_enabled=False)
    last = producer.send(b"road-works")
    raw = RawConnection(follower_port)
    try:
        raw.handshake()
        raw.subscribe(
            topic,
            "fans",
            wire.CommandSubscribe.Exclusive,
            consumer_id=10,
            consumer_name="raw-vehicle",
            metadata=[wire.KeyValue(key=k, value=v) for k, v in BROADCAST.items()],
        )
        raw.send_command(wire.CommandGetLastMessageId(consumer_id=10, request_id=30))
        answer = raw.expect(wire.BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE).body()
        assert (answer.last_message_id.ledger_id, answer.last_message_id.entry_id) == (
            last.ledger_id(),
            last.entry_id(),
        )
    finally:
        raw.close()
