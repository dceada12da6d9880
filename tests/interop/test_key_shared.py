"""Key_Shared (AUTO_SPLIT and STICKY) and delayed delivery with the official client."""

from __future__ import annotations

import time
from collections import defaultdict
from datetime import timedelta

import pulsar
import pytest

from magnetar.broker.dispatchers.sticky_keys import sticky_key_hash

from .support import receive_n

pytestmark = pytest.mark.interop

KEY_SHARED = pulsar.ConsumerType.KeyShared
#: With AUTO_SPLIT a second consumer takes the hashes 32768..65535 from the first.
FRESH = next(k for k in (f"fresh-{i}" for i in range(1000)) if sticky_key_hash(k.encode()) >= 32768)


def produce_keyed(producer, keys: list[str], per_key: int) -> None:
    for i in range(per_key):
        for key in keys:
            producer.send_async(f"{key}:{i}".encode(), None, partition_key=key)
    producer.flush()


@pytest.mark.slow
def test_auto_split_gives_each_key_to_one_consumer_in_order(client, topic):
    consumers = [
        client.subscribe(topic, "ks", consumer_type=KEY_SHARED, consumer_name=f"c{i}") for i in range(2)
    ]
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(20)]
    produce_keyed(producer, keys, per_key=10)

    seen: dict[str, list[int]] = defaultdict(list)
    owner: dict[str, int] = {}
    received = 0
    deadline = time.monotonic() + 20
    while received < 200 and time.monotonic() < deadline:
        for index, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(100)
            except pulsar.Timeout:
                continue
            key, number = msg.data().decode().split(":")
            assert owner.setdefault(key, index) == index, f"{key} went to two consumers"
            seen[key].append(int(number))
            consumer.acknowledge(msg)
            received += 1
    assert received == 200
    assert all(numbers == list(range(10)) for numbers in seen.values()), "per-key order"
    assert len(set(owner.values())) == 2, "both consumers got keys"


def test_sticky_ranges_route_by_pulsar_hash_and_refuse_overlaps(client, topic):
    low = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(0, 32767)]
    )
    high = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(32768, 65535)]
    )
    c_low = client.subscribe(topic, "ks", consumer_type=KEY_SHARED, key_shared_policy=low)
    c_high = client.subscribe(topic, "ks", consumer_type=KEY_SHARED, key_shared_policy=high)
    overlapping = pulsar.ConsumerKeySharedPolicy(
        key_shared_mode=pulsar.KeySharedMode.Sticky, sticky_ranges=[(100, 200)]
    )
    with pytest.raises(pulsar.PulsarException):
        client.subscribe(topic, "ks", consumer_type=KEY_SHARED, key_shared_policy=overlapping)

    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"k{i}" for i in range(30)]
    produce_keyed(producer, keys, per_key=1)
    expected_low = {k for k in keys if sticky_key_hash(k.encode()) <= 32767}
    got_low = {m.data().decode().split(":")[0] for m in receive_n(c_low, len(expected_low), ack=True)}
    got_high = {m.data().decode().split(":")[0] for m in receive_n(c_high, 30 - len(expected_low), ack=True)}
    assert got_low == expected_low
    assert got_high == set(keys) - expected_low
    # The next message of a low key is c_low's next: one sent to it twice would come before it.
    producer.send(b"end", partition_key=min(expected_low))
    assert [m.data() for m in receive_n(c_low, 1, ack=True)] == [b"end"]


def test_new_consumer_gets_no_newer_message_of_a_key_before_older_ones_are_acked(client, topic):
    first = client.subscribe(
        topic, "ks", consumer_type=KEY_SHARED, consumer_name="a", receiver_queue_size=100
    )
    producer = client.create_producer(topic, batching_enabled=False)
    keys = [f"key-{i}" for i in range(16)]
    produce_keyed(producer, keys, per_key=1)
    held = receive_n(first, 16)  # delivered to the first consumer, not acknowledged yet

    second = client.subscribe(
        topic, "ks", consumer_type=KEY_SHARED, consumer_name="b", receiver_queue_size=100
    )
    for key in keys:
        producer.send(f"{key}:1".encode(), partition_key=key)
    # A key of the second consumer's half with nothing older held: it goes at once, after the rest.
    producer.send(b"fresh:0", partition_key=FRESH)
    # Keys that moved to the second consumer wait until the first acknowledges their older message:
    # stored before "fresh", one sent early would have come first.
    (first_to_second,) = receive_n(second, 1, ack=True)
    assert first_to_second.data() == b"fresh:0", "a newer message overtook an unacknowledged older one"
    for msg in held:
        first.acknowledge(msg)

    by_consumer: dict[str, list[str]] = {"a": [], "b": []}
    deadline = time.monotonic() + 10
    while sum(map(len, by_consumer.values())) < 16 and time.monotonic() < deadline:
        for name, consumer in (("a", first), ("b", second)):
            try:
                msg = consumer.receive(100)
            except pulsar.Timeout:
                continue
            by_consumer[name].append(msg.data().decode())
            consumer.acknowledge(msg)
    assert sorted(by_consumer["a"] + by_consumer["b"]) == sorted(f"{k}:1" for k in keys)
    assert by_consumer["b"], "the new consumer took over some keys"


@pytest.mark.slow
def test_delayed_delivery_waits_and_survives_a_restart(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "delayed", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"later", deliver_after=timedelta(seconds=3))
    producer.send(b"now")
    now = consumer.receive(2000)
    assert now.data() == b"now"
    consumer.acknowledge(now)
    with pytest.raises(pulsar.Timeout):  # the delay is the behaviour: not a second of it passes early
        consumer.receive(1000)
    client.close()  # flushes the ack
    assert broker.stop() == 0
    broker.restart(same_port=False)
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "delayed", consumer_type=pulsar.ConsumerType.Shared)
    msg = consumer.receive(8000)
    assert msg.data() == b"later"
    assert msg.publish_timestamp() + 3000 <= int(time.time() * 1000) + 50
