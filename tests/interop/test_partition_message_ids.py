"""The official client on the partitions of a partitioned topic: every MESSAGE's id names its
partition, as Pulsar's broker writes it.

Without it a reader opened on one partition never ended: GET_LAST_MESSAGE_ID names the
partition, the C++ client compares ids partition included, so the last id read (partition -1)
was never equal to the broker's last one and ``has_message_available()`` stayed True.
"""

from __future__ import annotations

import pulsar
import pytest

from magnetar import client as ours

from .support import admin_call, msg_id_tuple, read_stored, receive_n

pytestmark = pytest.mark.interop


@pytest.fixture
def partitioned(broker, topic) -> str:
    """``topic``, made a partitioned topic of two partitions."""
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/partitions"
    assert admin_call(broker, "PUT", path, 2)[0] == 204
    return topic


def test_a_reader_of_one_partition_reads_what_is_stored_and_then_has_nothing_more(client, partitioned):
    partition = f"{partitioned}-partition-1"
    producer = client.create_producer(partition, batching_enabled=False)
    sent = [producer.send(b"m%d" % i) for i in range(3)]
    reader = client.create_reader(partition, pulsar.MessageId.earliest)
    assert reader.has_message_available()
    messages = read_stored(reader)
    assert [m.data() for m in messages] == [b"m0", b"m1", b"m2"]
    assert [msg_id_tuple(m.message_id()) for m in messages] == [msg_id_tuple(i) for i in sent]
    assert [m.message_id().partition() for m in messages] == [1, 1, 1]
    assert not reader.has_message_available()
    producer.send(b"m3")
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m3"
    assert not reader.has_message_available()


def test_a_consumer_of_a_partitioned_topic_gets_ids_naming_their_partition(client, partitioned):
    consumer = client.subscribe(partitioned, "sub")
    producer = client.create_producer(
        partitioned,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(6):
        producer.send(b"%d" % i)
    got = receive_n(consumer, 6, ack=True)
    named = {(m.topic_name(), m.message_id().partition()) for m in got}
    assert named == {(f"{partitioned}-partition-{i}", i) for i in range(2)}


def test_our_client_still_reads_a_partition_to_its_end_and_a_partitioned_topic(broker, partitioned):
    # Our client reads the MESSAGE's new field and keeps naming the partition it subscribed to.
    with ours.Client(broker.service_url) as client:
        partition = f"{partitioned}-partition-0"
        producer = client.create_producer(partition, batching_enabled=False)
        for i in range(3):
            producer.send(b"m%d" % i)
        reader = client.create_reader(partition, ours.MessageId.earliest)
        assert [m.data() for m in read_stored(reader)] == [b"m0", b"m1", b"m2"]
        assert not reader.has_message_available()
        consumer = client.subscribe(partitioned, "sub", initial_position=ours.InitialPosition.Earliest)
        got = receive_n(consumer, 3, ack=True)
        assert [m.data() for m in got] == [b"m0", b"m1", b"m2"]
        assert {m.message_id().partition() for m in got} == {0}
