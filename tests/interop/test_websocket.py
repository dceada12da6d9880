"""Pulsar's WebSocket API on the broker's HTTP port, with an ordinary WebSocket client (the
``websockets`` library) on one side and the official pulsar-client on the other: WS producer ->
official consumer, official producer -> WS consumer and reader, acks, negative acks, pull mode,
end of topic, partitioned topics, token auth and authorization, and bad input."""

from __future__ import annotations

import base64
import json
import urllib.parse
import urllib.request

import pulsar
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from tests.interop.support import receive_n
from tests.waiting import eventually

pytestmark = pytest.mark.slow

TIMEOUT_S = 10


def ws_url(broker, kind: str, topic: str, *tail: str, **params: object) -> str:
    """``ws://host:port/ws/v2/{kind}/persistent/t/ns/topic[/tail][?params]`` for a topic URL."""
    domain, rest = topic.split("://", 1)
    http = broker.http_url.replace("http://", "ws://")
    path = "/".join([f"{http}/ws/v2/{kind}/{domain}", rest, *tail])
    query = urllib.parse.urlencode(
        {k: str(v).lower() if isinstance(v, bool) else v for k, v in params.items()}
    )
    return f"{path}?{query}" if query else path


def publish(ws, payload: bytes, **fields: object) -> dict:
    ws.send(json.dumps({"payload": base64.b64encode(payload).decode(), **fields}))
    return json.loads(ws.recv(TIMEOUT_S))


def next_message(ws) -> dict:
    return json.loads(ws.recv(TIMEOUT_S))


def payload_of(message: dict) -> bytes:
    return base64.b64decode(message["payload"])


# -- producing ----------------------------------------------------------------------------------------
def test_ws_producer_to_official_consumer(broker, client, topic):
    consumer = client.subscribe(topic, "s")
    with connect(ws_url(broker, "producer", topic)) as ws:
        acks = [
            publish(ws, b"one", context="c1", key="k1", properties={"a": "1"}),
            publish(ws, b"two", context=2, eventTime="2024-05-01T12:00:00.5+02:00"),
        ]
    assert [a["result"] for a in acks] == ["ok", "ok"]
    assert [a["context"] for a in acks] == ["c1", "2"]
    first, second = receive_n(consumer, 2, ack=True)
    assert (first.data(), first.partition_key(), first.properties()) == (b"one", "k1", {"a": "1"})
    assert second.data() == b"two"
    assert second.event_timestamp() == 1714557600500
    # The ack's message id is the one the official consumer sees, serialized as the client does.
    assert base64.b64decode(acks[0]["messageId"]) == first.message_id().serialize()
    assert base64.b64decode(acks[1]["messageId"]) == second.message_id().serialize()


def test_ws_producer_batching_stores_several_messages_per_entry(broker, client, topic):
    """``batchingEnabled``: up to ``batchingMaxMessages`` an entry (or what came within
    ``batchingMaxPublishDelay``), each message answered with the id the official client sees, and
    each keeping its own key, properties and event time; a delayed message goes alone."""
    consumer = client.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared)
    url = ws_url(
        broker, "producer", topic, batchingEnabled=True, batchingMaxMessages=5, batchingMaxPublishDelay=1500
    )
    with connect(url) as ws:
        for i in range(12):  # pipelined: 5, 5, and 2 sent by the delay
            fields = {"key": f"k{i}", "properties": {"n": str(i)}, "eventTime": 1_000 + i, "context": str(i)}
            ws.send(json.dumps({"payload": base64.b64encode(b"m%d" % i).decode(), **fields}))
        acks = [next_message(ws) for _ in range(12)]
        delayed = publish(ws, b"delayed", deliverAfterMs=1)
    assert [a["result"] for a in acks] == ["ok"] * 12 and [a["context"] for a in acks] == [
        str(i) for i in range(12)
    ]
    ids = [pulsar.MessageId.deserialize(base64.b64decode(a["messageId"])) for a in acks]
    entries = [(i.ledger_id(), i.entry_id()) for i in ids]
    assert [entries.count(e) for e in dict.fromkeys(entries)] == [5, 5, 2]
    assert [i.batch_index() for i in ids] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1]
    alone = pulsar.MessageId.deserialize(base64.b64decode(delayed["messageId"]))
    assert alone.batch_index() == -1 and (alone.ledger_id(), alone.entry_id()) not in entries
    got = {m.data(): m for m in receive_n(consumer, 13, ack=True)}
    for i, ack in enumerate(acks):
        message = got[b"m%d" % i]
        assert base64.b64decode(ack["messageId"]) == message.message_id().serialize()
        assert (message.partition_key(), message.properties(), message.event_timestamp()) == (
            f"k{i}",
            {"n": str(i)},
            1_000 + i,
        )
    assert got[b"delayed"].message_id().serialize() == base64.b64decode(delayed["messageId"])


def test_ws_producer_bad_input_answers_that_message_only(broker, client, topic):
    consumer = client.subscribe(topic, "s")
    with connect(ws_url(broker, "producer", topic)) as ws:
        ws.send("{not json")
        assert next_message(ws)["result"] == "send-error:3"
        ws.send(json.dumps({"payload": "***", "context": "bad"}))
        bad = next_message(ws)
        assert (bad["result"], bad["context"]) == ("send-error:7", "bad")
        assert "Base64" in bad["errorMsg"]
        ws.send(json.dumps({"context": "none"}))
        assert next_message(ws)["result"] == "send-error:7"
        ws.send(json.dumps({"payload": "", "eventTime": "yesterday"}))
        assert next_message(ws)["result"] == "send-error:7"
        assert publish(ws, b"still here")["result"] == "ok"
    assert [m.data() for m in receive_n(consumer, 1)] == [b"still here"]


def test_ws_producer_oversized_message_refused_others_stored(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": 10_000})
    consumer = client_factory(broker.service_url).subscribe(topic, "s")
    with connect(ws_url(broker, "producer", topic)) as ws:
        big = publish(ws, b"x" * 20_000, context="big")
        assert big["result"] == "send-error:8" and "maximum message size" in big["errorMsg"], big
        assert publish(ws, b"small")["result"] == "ok"
    assert [m.data() for m in receive_n(consumer, 1)] == [b"small"]


# -- consuming ----------------------------------------------------------------------------------------
def test_official_producer_to_ws_consumer_with_acks(broker, client, topic):
    with connect(ws_url(broker, "consumer", topic, "sub")) as ws:
        producer = client.create_producer(topic, batching_enabled=False)
        ids = [
            producer.send(f"m{i}".encode(), properties={"i": str(i)}, partition_key=f"k{i}") for i in range(3)
        ]
        got = [next_message(ws) for _ in range(3)]
        assert [payload_of(m) for m in got] == [b"m0", b"m1", b"m2"]
        assert [base64.b64decode(m["messageId"]) for m in got] == [i.serialize() for i in ids]
        assert got[0]["properties"] == {"i": "0"} and got[0]["key"] == "k0"
        assert got[0]["redeliveryCount"] == 0 and "T" in got[0]["publishTime"]
        for m in got:
            ws.send(json.dumps({"messageId": m["messageId"]}))
    # Acknowledged: a new consumer of the subscription gets only what comes next.
    with connect(ws_url(broker, "consumer", topic, "sub")) as ws:
        producer.send(b"after")
        assert payload_of(next_message(ws)) == b"after"


def test_ws_consumer_batches_keep_official_ids(broker, client, topic):
    with connect(ws_url(broker, "consumer", topic, "sub")) as ws:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_messages=3, batching_max_publish_delay_ms=1000
        )
        futures = []
        for i in range(3):
            producer.send_async(f"b{i}".encode(), lambda res, msg_id, f=futures: f.append(msg_id))
        producer.flush()
        got = [next_message(ws) for _ in range(3)]
        assert [payload_of(m) for m in got] == [b"b0", b"b1", b"b2"]
        assert sorted(base64.b64decode(m["messageId"]) for m in got) == sorted(i.serialize() for i in futures)


def test_ws_consumer_negative_ack_redelivers(broker, client, topic):
    url = ws_url(broker, "consumer", topic, "sub", subscriptionType="Shared", negativeAckRedeliveryDelay=100)
    with connect(url) as ws:
        client.create_producer(topic).send(b"again")
        first = next_message(ws)
        ws.send(json.dumps({"type": "negativeAcknowledge", "messageId": first["messageId"]}))
        second = next_message(ws)
        assert payload_of(second) == b"again" and second["messageId"] == first["messageId"]
        assert second["redeliveryCount"] == 1


def test_ws_consumer_ack_timeout_redelivers(broker, client, topic):
    url = ws_url(broker, "consumer", topic, "sub", subscriptionType="Shared", ackTimeoutMillis=1000)
    with connect(url) as ws:
        client.create_producer(topic).send(b"unacked")
        first = next_message(ws)
        again = next_message(ws)  # not acknowledged within a second: delivered again
        assert again["messageId"] == first["messageId"] and again["redeliveryCount"] >= 1


def test_ws_consumer_pull_mode_sends_only_permitted(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    with connect(ws_url(broker, "consumer", topic, "sub", pullMode=True)) as ws:
        for i in range(5):
            producer.send(f"p{i}".encode())
        ws.send(json.dumps({"type": "permit", "permitMessages": 2}))
        assert [payload_of(next_message(ws)) for _ in range(2)] == [b"p0", b"p1"]
        # Nothing more until permitted: the end-of-topic answer comes next, not a third message.
        ws.send(json.dumps({"type": "isEndOfTopic"}))
        assert next_message(ws) == {"endOfTopic": False}
        ws.send(json.dumps({"type": "permit", "permitMessages": 3}))
        assert [payload_of(next_message(ws)) for _ in range(3)] == [b"p2", b"p3", b"p4"]


def test_ws_consumer_push_mode_stops_at_receiver_queue_size(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    with connect(ws_url(broker, "consumer", topic, "sub", receiverQueueSize=2)) as ws:
        for i in range(3):
            producer.send(f"q{i}".encode())
        got = [next_message(ws) for _ in range(2)]
        ws.send(json.dumps({"type": "isEndOfTopic"}))
        assert next_message(ws) == {"endOfTopic": False}  # not q2: two are out unacknowledged
        ws.send(json.dumps({"messageId": got[0]["messageId"]}))
        assert payload_of(next_message(ws)) == b"q2"


def test_ws_consumer_end_of_topic(broker, client, topic):
    with connect(ws_url(broker, "consumer", topic, "sub", subscriptionType="Shared")) as ws:
        client.create_producer(topic).send(b"last")
        message = next_message(ws)
        ws.send(json.dumps({"type": "isEndOfTopic"}))
        assert next_message(ws) == {"endOfTopic": False}
        ws.send(json.dumps({"messageId": message["messageId"]}))
        path = topic.replace("persistent://", "persistent/")
        request = urllib.request.Request(f"{broker.http_url}/admin/v2/{path}/terminate", method="POST")
        urllib.request.urlopen(request, timeout=TIMEOUT_S).read()

        def reached() -> bool:
            ws.send(json.dumps({"type": "isEndOfTopic"}))
            return next_message(ws)["endOfTopic"]

        eventually(reached, what="the WebSocket consumer reached the end of the terminated topic")


def test_ws_consumer_malformed_command_closes_that_session_only(broker, client, topic):
    producer = client.create_producer(topic)
    with (
        connect(ws_url(broker, "consumer", topic, "other")) as healthy,
        connect(ws_url(broker, "consumer", topic, "sub")) as ws,
    ):
        ws.send("{nope")
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(TIMEOUT_S)
        assert closed.value.rcvd.code == 4003
        assert "de-serialize" in closed.value.rcvd.reason
        producer.send(b"fine")
        assert payload_of(next_message(healthy)) == b"fine"


def test_ws_consumer_bad_query_is_400(broker, topic):
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(broker, "consumer", topic, "sub", subscriptionType="Sometimes"))
    assert refused.value.response.status_code == 400
    assert b"subscriptionType" in refused.value.response.body


# -- reading -----------------------------------------------------------------------------------------
def test_ws_reader_from_earliest_and_from_a_message_id(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"r{i}".encode()) for i in range(3)]
    with connect(ws_url(broker, "reader", topic, messageId="earliest")) as ws:
        got = [next_message(ws) for _ in range(3)]
    assert [payload_of(m) for m in got] == [b"r0", b"r1", b"r2"]
    start = base64.b64encode(ids[0].serialize()).decode()
    with connect(ws_url(broker, "reader", topic, messageId=start)) as ws:
        assert [payload_of(next_message(ws)) for _ in range(2)] == [b"r1", b"r2"]
    with connect(ws_url(broker, "reader", topic)) as ws:  # latest: only what comes next
        ws.send(json.dumps({"type": "isEndOfTopic"}))
        assert next_message(ws) == {"endOfTopic": False}
        producer.send(b"new")
        assert payload_of(next_message(ws)) == b"new"


# -- partitioned topics --------------------------------------------------------------------------------
def test_partitioned_topic_ws_producer_and_consumer(broker, client, topic):
    path = topic.replace("persistent://", "persistent/")
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/{path}/partitions",
        data=b"3",
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(request, timeout=TIMEOUT_S).read()
    consumer = client.subscribe(topic, "official")
    with (
        connect(ws_url(broker, "consumer", topic, "ws")) as reader,
        connect(ws_url(broker, "producer", topic, messageRoutingMode="RoundRobinPartition")) as ws,
    ):
        acks = [publish(ws, f"p{i}".encode()) for i in range(6)]
        assert {a["result"] for a in acks} == {"ok"}
        got = receive_n(consumer, 6, ack=True)
        assert sorted(m.data() for m in got) == [f"p{i}".encode() for i in range(6)]
        assert {m.message_id().partition() for m in got} == {0, 1, 2}
        official = {m.message_id().serialize() for m in got}
        assert {base64.b64decode(a["messageId"]) for a in acks} == official
        ws_got = [next_message(reader) for _ in range(6)]
        assert {base64.b64decode(m["messageId"]) for m in ws_got} == official


# -- authentication and authorization -----------------------------------------------------------------
def test_token_auth_query_and_header_and_authorization(broker_factory, client_factory, topic):
    from magnetar.security import tokens

    key = tokens.create_secret_key()
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "authorization_enabled": True,
            "superuser_roles": ["admin"],
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
        }
    )
    admin = tokens.create_token(key, "admin", 600)
    reader_token = tokens.create_token(key, "reader", 600)
    grant = urllib.request.Request(
        f"{broker.http_url}/admin/v2/namespaces/public/default/permissions/reader",
        data=b'["consume"]',
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {admin}"},
    )
    urllib.request.urlopen(grant, timeout=TIMEOUT_S).read()
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(broker, "producer", topic))  # no credentials
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(broker, "producer", topic, token="not-a-token"))
    assert refused.value.response.status_code == 401
    with pytest.raises(InvalidStatus) as refused:
        connect(ws_url(broker, "producer", topic, token=reader_token))  # consume only
    assert refused.value.response.status_code == 403
    with (
        connect(ws_url(broker, "consumer", topic, "sub", token=reader_token)) as consumer_ws,
        connect(
            ws_url(broker, "producer", topic), additional_headers={"Authorization": f"Bearer {admin}"}
        ) as producer_ws,
    ):
        assert publish(producer_ws, b"secured")["result"] == "ok"
        assert payload_of(next_message(consumer_ws)) == b"secured"


# -- chunked messages, durability -----------------------------------------------------------------------
def test_ws_consumer_gets_chunked_messages_whole(broker_factory, client_factory, topic):
    broker = broker_factory({"max_message_size": 10_000})
    client = client_factory(broker.service_url)
    big = bytes(range(256)) * 100  # 25,600 bytes: three chunks
    with connect(ws_url(broker, "consumer", topic, "sub")) as ws:
        producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        sent = producer.send(big)
        producer.send(b"small")
        message = next_message(ws)
        assert payload_of(message) == big
        assert base64.b64decode(message["messageId"]) == sent.serialize()
        ws.send(json.dumps({"messageId": message["messageId"]}))
        small = next_message(ws)
        assert payload_of(small) == b"small"
        ws.send(json.dumps({"messageId": small["messageId"]}))
    # Every chunk was acknowledged: the subscription has nothing left.
    path = topic.replace("persistent://", "persistent/")

    def backlog() -> int:
        with urllib.request.urlopen(f"{broker.http_url}/admin/v2/{path}/stats", timeout=TIMEOUT_S) as answer:
            return json.loads(answer.read())["subscriptions"]["sub"]["msgBacklog"]

    eventually(lambda: backlog() == 0, what="the subscription's backlog emptied by the acks")


def test_ws_acks_mean_on_disk_across_kill_9(broker, client_factory, topic):
    with connect(ws_url(broker, "producer", topic)) as ws:
        acks = [publish(ws, f"durable-{i}".encode(), context=str(i)) for i in range(20)]
    assert {a["result"] for a in acks} == {"ok"}
    broker.kill9()
    broker.restart()
    reader = client_factory(broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(TIMEOUT_S * 1000) for _ in range(20)]
    assert [m.data() for m in got] == [f"durable-{i}".encode() for i in range(20)]
    assert [m.message_id().serialize() for m in got] == [base64.b64decode(a["messageId"]) for a in acks]


def test_ws_consumer_subscribes_again_when_the_broker_closes_it(broker, client, topic):
    """A reset cursor disconnects every consumer (as Pulsar's): the WebSocket consumer subscribes
    again, as a client would, and gets the messages again from the reset position."""
    producer = client.create_producer(topic, batching_enabled=False)
    with connect(ws_url(broker, "consumer", topic, "sub")) as ws:
        for i in range(2):
            producer.send(f"m{i}".encode())
        first = [next_message(ws) for _ in range(2)]
        for m in first:
            ws.send(json.dumps({"messageId": m["messageId"]}))
        path = topic.replace("persistent://", "persistent/")
        reset = f"{broker.http_url}/admin/v2/{path}/subscription/sub/resetcursor/0"
        urllib.request.urlopen(urllib.request.Request(reset, method="POST"), timeout=TIMEOUT_S).read()
        again = [next_message(ws) for _ in range(2)]
        assert [payload_of(m) for m in again] == [b"m0", b"m1"]
        assert [m["messageId"] for m in again] == [m["messageId"] for m in first]


def test_ws_on_a_non_persistent_topic(broker, topic):
    topic = topic.replace("persistent://", "non-persistent://")
    with (
        connect(ws_url(broker, "consumer", topic, "sub")) as consumer,
        connect(ws_url(broker, "producer", topic)) as producer,
    ):
        assert publish(producer, b"live")["result"] == "ok"
        assert payload_of(next_message(consumer)) == b"live"


def test_revoked_grant_closes_the_ws_consumer_with_the_reason(broker_factory, topic):
    from magnetar.security import tokens

    key = tokens.create_secret_key()
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "authorization_enabled": True,
            "superuser_roles": ["admin"],
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
        }
    )
    admin = {"Authorization": f"Bearer {tokens.create_token(key, 'admin', 600)}"}
    permissions = f"{broker.http_url}/admin/v2/namespaces/public/default/permissions/car"
    grant = urllib.request.Request(permissions, data=b'["consume"]', method="POST", headers=admin)
    grant.add_header("Content-Type", "application/json")
    urllib.request.urlopen(grant, timeout=TIMEOUT_S).read()
    with connect(ws_url(broker, "consumer", topic, "sub", token=tokens.create_token(key, "car", 600))) as ws:
        revoke = urllib.request.Request(permissions, method="DELETE", headers=admin)
        urllib.request.urlopen(revoke, timeout=TIMEOUT_S).read()
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(TIMEOUT_S)
    assert closed.value.rcvd.code == 4002
    assert "not authorized" in closed.value.rcvd.reason


def test_revoked_grant_closes_the_ws_producer_with_the_reason(broker_factory, topic):
    """A producer the broker closes attaches again (docs/websocket.md, "When the topic moves"),
    unless it is refused for good: then the WebSocket closes with the refusal."""
    from magnetar.security import tokens

    key = tokens.create_secret_key()
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "authorization_enabled": True,
            "superuser_roles": ["admin"],
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
        }
    )
    admin = {"Authorization": f"Bearer {tokens.create_token(key, 'admin', 600)}"}
    permissions = f"{broker.http_url}/admin/v2/namespaces/public/default/permissions/car"
    grant = urllib.request.Request(permissions, data=b'["produce"]', method="POST", headers=admin)
    grant.add_header("Content-Type", "application/json")
    urllib.request.urlopen(grant, timeout=TIMEOUT_S).read()
    with connect(ws_url(broker, "producer", topic, token=tokens.create_token(key, "car", 600))) as ws:
        assert publish(ws, b"granted")["result"] == "ok"
        revoke = urllib.request.Request(permissions, method="DELETE", headers=admin)
        urllib.request.urlopen(revoke, timeout=TIMEOUT_S).read()
        with pytest.raises(ConnectionClosed) as closed:
            ws.recv(TIMEOUT_S)
    assert closed.value.rcvd.code == 4001
    assert "not authorized" in closed.value.rcvd.reason
