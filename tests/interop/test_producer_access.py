"""Producer access modes: Shared, Exclusive, WaitForExclusive, ExclusiveWithFencing."""

from __future__ import annotations

import threading

import pulsar
import pytest

from .support import read_stored

pytestmark = pytest.mark.interop

Mode = pulsar.ProducerAccessMode


def test_exclusive_refuses_others_and_is_refused_when_others_exist(client, topic):
    exclusive = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic)  # shared while exclusive holds the topic
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    exclusive.send(b"still mine")
    exclusive.close()
    shared = client.create_producer(topic)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, access_mode=Mode.Exclusive)  # a shared producer is connected
    shared.send(b"shared")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_stored(reader)] == [b"still mine", b"shared"]


@pytest.mark.slow
def test_wait_for_exclusive_gets_the_topic_when_the_holder_leaves(client, topic):
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    waited: list[pulsar.Producer] = []
    started = threading.Event()

    def wait_for_it():
        started.set()
        waited.append(client.create_producer(topic, access_mode=Mode.WaitForExclusive))

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    started.wait()
    thread.join(1.0)
    assert thread.is_alive() and not waited, "the waiting producer is not ready while the holder is there"
    holder.send(b"first")
    holder.close()
    thread.join(10)
    assert waited, "the waiting producer got exclusive access"
    waited[0].send(b"second")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_stored(reader)] == [b"first", b"second"]


def test_exclusive_with_fencing_takes_over(client, topic):
    old = client.create_producer(topic, access_mode=Mode.Shared, send_timeout_millis=3000)
    old.send(b"old")
    new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    new.send(b"new")
    with pytest.raises(pulsar.PulsarException):
        old.send(b"fenced out")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in read_stored(reader)] == [b"old", b"new"]
