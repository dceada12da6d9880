"""Bursts of many more messages than a subscriber's flow holds at once, against the real broker
process with paho-mqtt (3.1.1 and 5.0) and the official pulsar-client (docs/mqtt.md).

A clean-session subscriber takes its messages from the topic's broadcast subscription
``mqtt-subscribers``, whose dispatcher keeps at most ``broadcast_reads.WINDOW_ENTRIES`` (1,000)
entries read for its consumers, and whose MQTT consumers hold at most ``outbound.PERMITS`` (1,000)
messages between them (``GRANT``, 100, given a consumer at a time): a burst of 2,500 goes past
them all, at QoS 0 (acknowledged as written, never charged permits) and QoS 1 (acknowledged by
PUBACK), and every message arrives, once, in order. Batch entries (a Pulsar producer's, or an MQTT
publisher's PUBLISHes of one read stored together) end a dispatch round's permits in the middle of
what it read: the QoS 0 subscriber, with its permits still there, must be sent the rest.

The Pulsar producer blocks when its queue is full (``block_if_queue_full``): the official client
queues at most ``max_pending_messages`` (1,000) sends, and by default fails the rest at once with
``ProducerQueueIsFull``, which a burst of ``send_async`` without a callback never sees.
"""

from __future__ import annotations

import pulsar
import pytest

from ..waiting import NeverHappened, eventually
from .mqtt_support import PahoClient
from .test_mqtt import VERSIONS, pulsar_name, unique
from .test_mqtt_fanout import stats

#: Well over the broadcast read window and the connection's permits (1,000 each).
BURST = 2500


@pytest.fixture
def mqtt_broker(broker_factory):
    return broker_factory({"mqtt_port": 0})


def all_in_order(broker, subscriber: PahoClient, name: str, qos: int) -> None:
    try:
        eventually(lambda: len(subscriber.received.messages) >= BURST, timeout=30, what=f"{BURST} messages")
    except NeverHappened as missing:  # where the burst stopped: stored, or sent
        topic = stats(broker, name)
        raise AssertionError(
            f"{len(subscriber.received.messages)} of {BURST} arrived at QoS {qos}; the topic stored"
            f" {topic['msgInCounter']} and sent {topic['msgOutCounter']}"
        ) from missing
    messages = subscriber.received.messages
    assert [m[1] for m in messages] == [str(i).encode() for i in range(BURST)]
    assert {m[2] for m in messages} == {qos}


def subscriber_of(broker, version: int, session: str) -> PahoClient:
    """A clean session (the broadcast subscription), a durable one (its own Exclusive one), or a
    member of a shared subscription."""
    if session == "durable":
        return PahoClient(broker.mqtt_port, unique("burst-sub"), version, clean=False, session_expiry=60)
    return PahoClient(broker.mqtt_port, unique("burst-sub"), version)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("batched", "session"),
    [(False, "clean"), (True, "clean"), (True, "durable"), (True, "shared")],
    ids=["entries-clean", "batches-clean", "batches-durable", "batches-shared"],
)
@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_burst_from_a_pulsar_producer_reaches_a_subscriber(
    mqtt_broker, client_factory, version, qos, batched, session
):
    """Batches of 50 messages: a dispatch round reaches the consumer's permits (100 at a time) in
    the middle of what it read, and a QoS 0 subscriber, never charged for what it is sent, must
    still be sent the rest."""
    name = unique("burst/pulsar")
    subscriber = subscriber_of(mqtt_broker, version, session)
    client = client_factory(mqtt_broker.service_url)
    try:
        topic_filter = f"$share/burst/{name}" if session == "shared" else name
        assert subscriber.subscribe(topic_filter, qos) == [qos]
        producer = client.create_producer(
            pulsar_name(name),
            batching_enabled=batched,
            batching_max_messages=50,
            batching_max_publish_delay_ms=100,
            block_if_queue_full=True,
        )
        results: list[pulsar.Result] = []
        for i in range(BURST):
            producer.send_async(str(i).encode(), lambda result, _id: results.append(result))
        producer.flush()
        eventually(lambda: len(results) == BURST, what="every send answered")
        assert set(results) == {pulsar.Result.Ok}
        all_in_order(mqtt_broker, subscriber, name, qos)
    finally:
        subscriber.close()


@pytest.mark.slow
@pytest.mark.parametrize("qos", [0, 1])
@pytest.mark.parametrize("version", VERSIONS)
def test_a_burst_from_an_mqtt_publisher_reaches_a_clean_session_subscriber(mqtt_broker, version, qos):
    name = unique("burst/mqtt")
    subscriber = PahoClient(mqtt_broker.mqtt_port, unique("burst-sub"), version)
    publisher = PahoClient(mqtt_broker.mqtt_port, unique("burst-pub"), version)
    try:
        assert subscriber.subscribe(name, qos) == [qos]
        sent = [publisher.client.publish(name, str(i).encode(), qos=qos) for i in range(BURST)]
        for info in sent:
            info.wait_for_publish(30)
            assert info.is_published()
        all_in_order(mqtt_broker, subscriber, name, qos)
    finally:
        publisher.close()
        subscriber.close()
