"""The WebSocket API and REST produce with ``--workers 2``: a session or a request that reaches a
worker that does not own its topic, or owns only some of a partitioned topic's partitions, is
served whole, through Pulsar sessions to the owners, with the owners' ids and under the client's
own credentials."""

from __future__ import annotations

import base64
import json
import types
import urllib.request

import pulsar
import pytest
from websockets.sync.client import connect

from tests.interop.support import receive_n
from tests.interop.test_rest_produce import escaped_near_limit, post
from tests.interop.test_websocket import next_message, payload_of, publish, ws_url
from tests.interop.test_workers import WORKERS, topics_on_two_owners
from tests.interop.test_workers_partitioned import PARTITIONS, spread_topic

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def own_http_url(broker, topic: str) -> str:
    """The HTTP URL of the worker that owns ``topic`` (Pulsar's HTTP lookup names it)."""
    path = topic.replace("://", "/", 1)
    with urllib.request.urlopen(f"{broker.http_url}/lookup/v2/topic/{path}", timeout=10) as answer:
        return json.loads(answer.read())["httpUrl"]


def test_ws_and_rest_produce_on_the_other_workers_port_reach_the_owner(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "ws")
    first, second = list({owner: topic for topic, owner in owners.items()}.values())
    for topic, other in ((first, second), (second, first)):
        # The worker that owns ``other``, not ``topic``: every call below is relayed or proxied.
        elsewhere = types.SimpleNamespace(http_url=own_http_url(broker, other))
        assert elsewhere.http_url != own_http_url(broker, topic)
        official = client_factory(broker.service_url).subscribe(topic, "official")
        with connect(ws_url(elsewhere, "consumer", topic, "ws")) as consumer:
            with connect(ws_url(elsewhere, "producer", topic)) as producer:
                ack = publish(producer, b"over a websocket")
            assert ack["result"] == "ok", ack
            status, answer = post(elsewhere, topic, {"messages": [{"payload": "over REST"}]})
            assert status == 200 and answer["messagePublishResults"][0]["errorCode"] == 0, answer
            assert [payload_of(next_message(consumer)) for _ in range(2)] == [
                b"over a websocket",
                b"over REST",
            ]
        first_message, second_message = receive_n(official, 2, ack=True)
        assert first_message.data() == b"over a websocket"
        assert base64.b64decode(ack["messageId"]) == first_message.message_id().serialize()
        ledger, entry, _ = answer["messagePublishResults"][0]["messageId"].split(":")
        assert (second_message.message_id().ledger_id(), second_message.message_id().entry_id()) == (
            int(ledger),
            int(entry),
        )
    assert "a session to worker-" in broker.log_tail(200_000)


def test_partitioned_topic_served_whole_from_each_workers_port(broker_factory, client_factory):
    """Each worker owns some partitions; a WebSocket producer, consumer and reader and a REST
    request on the partitioned topic's own name, on either worker's port, reach every partition."""
    broker = broker_factory(WORKERS)
    topic, _, admins = spread_topic(broker)
    official = client_factory(broker.service_url).subscribe(
        topic, "official", consumer_type=pulsar.ConsumerType.Shared
    )
    ids: set[bytes] = set()
    for number, admin in enumerate(admins):
        port = types.SimpleNamespace(http_url=admin.http_url)
        sent = [f"w{number}-{i}".encode() for i in range(2 * PARTITIONS)]
        with (
            connect(ws_url(port, "consumer", topic, f"ws-{number}", subscriptionType="Shared")) as consumer,
            connect(ws_url(port, "producer", topic, messageRoutingMode="RoundRobinPartition")) as producer,
        ):
            acks = [publish(producer, payload) for payload in sent[:PARTITIONS]]
            assert {a["result"] for a in acks} == {"ok"}, acks
            status, answer = post(
                port, topic, {"messages": [{"payload": p.decode()} for p in sent[PARTITIONS:]]}
            )
            assert status == 200, answer
            results = answer["messagePublishResults"]
            assert [r["errorCode"] for r in results] == [0] * PARTITIONS, results
            got = [next_message(consumer) for _ in sent]
            assert sorted(payload_of(m) for m in got) == sorted(sent)
            for message in got:
                consumer.send(json.dumps({"messageId": message["messageId"]}))
        # Every partition took one WebSocket and one REST message, wherever it is served.
        ws_ids = {base64.b64decode(a["messageId"]) for a in acks}
        assert {pulsar.MessageId.deserialize(i).partition() for i in ws_ids} == set(range(PARTITIONS))
        assert {int(r["messageId"].rsplit(":", 1)[1]) for r in results} == set(range(PARTITIONS))
        received = receive_n(official, len(sent), ack=True)
        assert sorted(m.data() for m in received) == sorted(sent)
        assert ws_ids <= {m.message_id().serialize() for m in received}
        assert {base64.b64decode(m["messageId"]) for m in got} == {
            m.message_id().serialize() for m in received
        }
        ids |= ws_ids
        # The WebSocket consumer's acks reached every partition's owner.
        backlog = admin.topics.partitioned_stats(topic)["subscriptions"][f"ws-{number}"]["msgBacklog"]
        assert backlog == 0
    with connect(
        ws_url(types.SimpleNamespace(http_url=admins[0].http_url), "reader", topic, messageId="earliest")
    ) as reader:
        read = [next_message(reader) for _ in range(4 * PARTITIONS)]
    assert ids <= {base64.b64decode(m["messageId"]) for m in read}


def test_rest_produce_close_to_max_message_size_on_the_other_workers_port(broker_factory, client_factory):
    broker = broker_factory({**WORKERS, "max_message_size": 1_500_000})
    owners = topics_on_two_owners(broker.service_url, "big")
    topic, other = list({owner: topic for topic, owner in owners.items()}.values())
    elsewhere = types.SimpleNamespace(http_url=own_http_url(broker, other))
    consumer = client_factory(broker.service_url).subscribe(topic, "s")
    text = escaped_near_limit(1_500_000)
    status, answer = post(elsewhere, topic, json.dumps({"messages": [{"payload": text}]}).encode())
    assert status == 200 and answer["messagePublishResults"][0]["errorCode"] == 0, answer
    assert receive_n(consumer, 1, ack=True)[0].data() == text.encode()
