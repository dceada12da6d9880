"""Terminating a topic (``pulsar-admin topics terminate``): sends and new producers refused, the
end of the topic announced to consumers that acknowledged everything, across restarts."""

from __future__ import annotations

import pytest
from pulsar.exceptions import TopicTerminated

from magnetar.client import Client

from ..waiting import eventually
from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop


def _path(topic: str) -> str:
    return "/admin/v2/persistent/" + topic.split("://")[1]


def _backlogs(broker, topic: str) -> list[int]:
    status, stats = call(broker, "GET", _path(topic) + "/stats")
    assert status == 200, stats
    return [sub["msgBacklog"] for sub in stats["subscriptions"].values()]


def test_a_terminated_topic_refuses_sends_and_producers_even_after_a_restart(broker, client, topic):
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(b"m%d" % n) for n in range(3)]
    status, last = call(broker, "POST", _path(topic) + "/terminate")
    assert status == 200
    assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
    assert call(broker, "POST", _path(topic) + "/terminate") == (200, last)  # again: the same answer
    with pytest.raises(TopicTerminated):
        producer.send(b"late")
    with pytest.raises(TopicTerminated):
        client.create_producer(topic)
    assert [m.data() for m in receive_n(consumer, 3)] == [b"m0", b"m1", b"m2"]  # what was stored stays
    client.close()
    broker.stop()
    broker.restart()
    again = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        with pytest.raises(Exception, match="TopicTerminated"):
            again.create_producer(topic)
    finally:
        again.close()


def test_consumers_learn_the_end_once_everything_is_acknowledged(broker, client, topic):
    ours = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = ours.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        for n in range(3):
            producer.send(b"m%d" % n)
        assert call(broker, "POST", _path(topic) + "/terminate")[0] == 200
        messages = [consumer.receive(5000) for _ in range(3)]
        consumer.acknowledge(messages[0])
        consumer.acknowledge(messages[1])
        # The broker has both acks, and answers a request of the consumer after them: an end of
        # the topic told on those acks would have come first. m2 is not acknowledged: none came.
        eventually(lambda: _backlogs(broker, topic) == [1], what="the two acks at the broker")
        consumer.get_last_message_id()
        assert not consumer.has_reached_end_of_topic()
        consumer.acknowledge(messages[2])
        eventually(consumer.has_reached_end_of_topic, what="the end of the topic")
        # A consumer that comes later, with nothing left to acknowledge, learns it at once.
        consumer.close()
        later = ours.subscribe(topic, "sub")
        eventually(later.has_reached_end_of_topic, what="the end of the topic")
    finally:
        ours.close()


def test_a_reader_learns_the_end_once_it_has_read_everything(broker, client, topic):
    from magnetar.client import MessageId

    batched = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for n in range(5):
        batched.send_async(b"b%d" % n, None)
    batched.flush()
    single = client.create_producer(topic, batching_enabled=False)
    single.send(b"s0")
    for n in range(5, 8):  # the topic ends with a batch
        batched.send_async(b"b%d" % n, None)
    batched.flush()
    assert call(broker, "POST", _path(topic) + "/terminate")[0] == 200
    ours = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        reader = ours.create_reader(topic, MessageId.earliest)
        read = [reader.read_next(5000).data() for _ in range(8)]
        # The broker has the reader's acks of the first two entries (the last, a batch, is not
        # read whole) and answers a request of the reader after them: an end of the topic told on
        # them, or on the last entry's dispatch, would have come first. One message is left: none came.
        eventually(lambda: _backlogs(broker, topic) == [1], what="the reader's acks at the broker")
        reader.get_last_message_id()
        assert not reader.has_reached_end_of_topic()
        read.append(reader.read_next(5000).data())
        assert sorted(read) == sorted([b"b%d" % n for n in range(8)] + [b"s0"])
        eventually(reader.has_reached_end_of_topic, what="the end of the topic")
        assert not reader.has_message_available()
    finally:
        ours.close()


def test_a_partitioned_topic_is_terminated_partition_by_partition(broker, client, topic):
    assert call(broker, "PUT", _path(topic) + "/partitions", 2)[0] == 204
    status, body = call(broker, "POST", _path(topic) + "/terminate")
    assert status == 412 and "partitioned" in body["reason"]
    status, last = call(broker, "POST", _path(topic) + "/terminate/partitions")
    assert status == 200 and sorted(last) == ["0", "1"]
    assert [last[p]["partitionIndex"] for p in ("0", "1")] == [0, 1]
    with pytest.raises(TopicTerminated):
        client.create_producer(topic)
