"""Broadcast consumers' durable virtual cursors with the official client: consumers at different
positions, the broker stopped (SIGTERM) or killed (kill -9), the consumers subscribing again under
their names on a new client. Each gets what it had not acknowledged; after kill -9 also what it
acknowledged after the last flush of virtual cursors, never what it acknowledged before it."""

from __future__ import annotations

import pulsar
import pytest

from ..waiting import eventually
from .support import receive_n
from .test_broadcast import fan, subscription_stats

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: kill -9 and restarts

#: What each consumer acknowledges of the ten messages before the broker goes (by index).
ACKED = {"all": set(range(10)), "holes": {0, 1, 2, 3, 6}, "few": {0, 1, 2}}


def position(msg: pulsar.Message) -> str:
    msg_id = msg.message_id()
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}"


def consumer_stats(broker, topic: str) -> dict[str, dict]:
    return {c["consumerName"]: c for c in subscription_stats(broker, topic)["consumers"]}


def wait_for_acks(broker, topic: str, expected: dict[str, tuple[str, int]]) -> dict:
    """Until each consumer's virtual cursor is (mark-delete position, entries acknowledged past it)."""

    def check() -> dict:
        stats = consumer_stats(broker, topic)
        got = {
            name: (stats[name]["markDeletePosition"], stats[name]["ackedPastMarkDelete"]) for name in expected
        }
        assert got == expected
        return stats

    return eventually(check, what=f"virtual cursors {expected}")


def wait_for_a_flush(broker, topic: str) -> None:
    """Until the virtual cursors are written once more: every change made before this call is then stored."""
    before = subscription_stats(broker, topic)["dispatcher"]["virtualCursorFlushes"]
    eventually(
        lambda: subscription_stats(broker, topic)["dispatcher"]["virtualCursorFlushes"] > before,
        what="a flush of the virtual cursors",
    )


def take_positions(broker, client, topic: str) -> tuple[list[bytes], list[str], dict, dict]:
    """Three consumers at three positions, acknowledged as ``ACKED`` says, as the broker sees them;
    the messages sent, their positions, the consumers and what each received."""
    consumers = {name: fan(client, topic, name) for name in ACKED}
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"m-{i}".encode() for i in range(10)]
    for payload in sent:
        producer.send(payload)
    positions: list[str] = []
    received = {}
    for name, consumer in consumers.items():
        got = received[name] = receive_n(consumer, 10)
        assert [m.data() for m in got] == sent
        positions = [position(m) for m in got]
        for i in sorted(ACKED[name]):
            consumer.acknowledge(got[i])
    wait_for_acks(
        broker, topic, {"all": (positions[9], 0), "holes": (positions[3], 1), "few": (positions[2], 0)}
    )
    return sent, positions, consumers, received


def until_marker(consumer, marker: bytes) -> list[bytes]:
    """What the consumer gets before ``marker`` (all acknowledged), in order."""
    out = []
    while (msg := consumer.receive(10_000)).data() != marker:
        out.append(msg.data())
        consumer.acknowledge(msg)
    consumer.acknowledge(msg)
    return out


def resubscribe(broker, client_factory, topic: str) -> tuple[dict[str, list[bytes]], dict]:
    """The three consumers again, under their names, on a new client: what each gets before a
    marker sent once they are all subscribed, and the subscription's stats meanwhile."""
    client = client_factory(broker.service_url)
    consumers = {name: fan(client, topic, name) for name in ACKED}
    stats = subscription_stats(broker, topic)
    client.create_producer(topic).send(b"marker")
    return {name: until_marker(c, b"marker") for name, c in consumers.items()}, stats


def test_after_sigterm_each_consumer_gets_exactly_what_it_had_not_acknowledged(broker, client_factory, topic):
    sent, positions, _, _ = take_positions(broker, client_factory(broker.service_url), topic)
    broker.stop()  # with the consumers connected: the stop writes their virtual cursors
    broker.restart(same_port=False)  # the old client cannot take the virtual cursors back first
    got, stats = resubscribe(broker, client_factory, topic)
    for name, acked in ACKED.items():
        assert got[name] == [m for i, m in enumerate(sent) if i not in acked], name
    # The subscription's stored cursor still follows the slowest consumer.
    assert stats["markDeletePosition"] == positions[2]
    assert stats["msgBacklog"] == 7


def test_after_kill9_each_consumer_gets_at_least_what_it_had_not_acknowledged_and_nothing_flushed(
    broker, client_factory, topic
):
    client = client_factory(broker.service_url)
    sent, positions, consumers, received = take_positions(broker, client, topic)
    wait_for_a_flush(broker, topic)  # everything acknowledged so far is stored
    # Acknowledged after that flush: may be stored or not when the broker dies.
    later = {"holes": {4}, "few": {3, 4}}
    for name, indexes in later.items():
        for i in sorted(indexes):
            consumers[name].acknowledge(received[name][i])
    wait_for_acks(
        broker, topic, {"all": (positions[9], 0), "holes": (positions[4], 1), "few": (positions[4], 0)}
    )
    broker.kill9()
    broker.restart(same_port=False)
    got, _ = resubscribe(broker, client_factory, topic)
    for name, acked in ACKED.items():
        must = [m for i, m in enumerate(sent) if i not in acked and i not in later.get(name, set())]
        may = [m for i, m in enumerate(sent) if i not in acked]
        assert set(must) <= set(got[name]) <= set(may), name
        assert got[name] == sorted(got[name], key=sent.index), name  # in order, none twice
