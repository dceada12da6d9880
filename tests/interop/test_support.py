"""The receiving helpers of support.py on stand-ins for the official client's consumers: no broker."""

from __future__ import annotations

import itertools
import queue

import pytest
from pulsar.exceptions import Timeout

from .support import receive_spread


class Message:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def data(self) -> bytes:
        return self._data


class Consumer:
    """A receiver queue the test fills, as the broker would."""

    def __init__(self) -> None:
        self.queue: queue.Queue[bytes] = queue.Queue()
        self.acked: list[bytes] = []

    def receive(self, timeout_ms: int) -> Message:
        try:
            return Message(self.queue.get(timeout=timeout_ms / 1000))
        except queue.Empty:
            raise Timeout() from None

    def acknowledge(self, msg: Message) -> None:
        self.acked.append(msg.data())


class Producer:
    """Hands what it sends to its consumers in turn, as a Shared subscription does."""

    def __init__(self, consumers: list[Consumer]) -> None:
        self.turn = itertools.cycle(consumers)

    def send(self, data: bytes) -> None:
        next(self.turn).queue.put(data)


def test_receive_spread_gives_each_consumers_messages_and_acks_its_markers():
    consumers = [Consumer(), Consumer()]
    producer = Producer(consumers)
    for i in range(6):
        producer.send(b"m%d" % i)
    got = receive_spread(consumers, producer, expected=6, ack=[False, True])
    assert got == [[b"m0", b"m2", b"m4"], [b"m1", b"m3", b"m5"]]
    assert all(b"marker-of-" in m for m in consumers[0].acked)  # only its markers
    assert consumers[1].acked[:3] == [b"m1", b"m3", b"m5"]


def test_receive_spread_shows_an_extra_that_came_before_the_marker():
    consumers = [Consumer()]
    producer = Producer(consumers)
    for data in (b"a", b"b", b"a"):  # one message twice
        producer.send(data)
    assert receive_spread(consumers, producer, expected=2) == [[b"a", b"b", b"a"]]


def test_receive_spread_fails_when_the_count_never_comes():
    consumers = [Consumer()]
    consumers[0].queue.put(b"only")
    with pytest.raises(AssertionError, match=r"2 messages: nothing arrived for 0.3 s; received \[1\]"):
        receive_spread(consumers, Producer(consumers), expected=2, patience_s=0.3)
