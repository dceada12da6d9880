"""What an official C++ consumer held of a chunked message, kept across a broker restart by
subscription and consumer name (``chunk_contexts``), on a real topic and real storage with
consumers whose connections record what they are sent: the consumer of that name gets the
message's last chunk first (or the message twice, where the last chunk is not stored yet)."""

from __future__ import annotations

import pytest

from magnetar.broker.consumer import Consumer
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.storage.position import Position

from .entry_harness import chunk, message
from .recording import RecordingCnx, publish, sent_to

EXCLUSIVE = wire.CommandSubscribe.Exclusive
CPP = "Pulsar-CPP-v4.2.0"


def join(
    topic: PersistentTopic, name: str, permits: int, client: str = CPP, sub_type: int = EXCLUSIVE
) -> Consumer:
    cmd = wire.CommandSubscribe(
        topic=str(topic.name), subscription="sub", sub_type=sub_type, consumer_id=1, request_id=0
    )
    consumer = topic.subscribe(lambda s: Consumer(RecordingCnx(), s, 1, name), cmd)
    topic.watch_chunks(consumer, client)
    consumer.subscription.flow(consumer, permits)
    return consumer


def chunks(uuid: str, n: int) -> list[bytes]:
    return [chunk(b"%s-%d" % (uuid.encode(), i), uuid, i, n) for i in range(n)]


def ids(positions: list[Position]) -> list[int]:
    return [p.entry_id for p in positions]


def held_part_then_restart(harnesses, crash: bool = False, flushed: bool = True) -> list[Position]:
    """A consumer "c" got two of four chunks, then the broker stopped (or was killed); the positions."""
    h = harnesses()
    topic = h.topic()

    async def scenario() -> list[Position]:
        consumer = join(topic, "c", permits=2)
        stored = await publish(h, *chunks("u", 4))
        assert await sent_to(consumer, 2) == stored[:2]
        return stored

    stored = h.run(scenario())
    if not crash:
        h.close()
    else:
        if flushed:
            topic.flush()
        h.crash()
    return stored


def sent_after_restart(harnesses, name: str, count: int, client: str = CPP) -> list[Position]:
    """What a consumer ``name`` that joins the restarted broker is sent (``count`` messages)."""
    h = harnesses()

    async def scenario() -> list[Position]:
        return await sent_to(join(h.topic(), name, permits=100, client=client), count)

    return h.run(scenario())


def test_after_a_graceful_restart_the_consumer_of_that_name_gets_the_last_chunk_first(harnesses):
    stored = held_part_then_restart(harnesses)
    assert sent_after_restart(harnesses, "c", 5) == stored[-1:] + stored


def test_a_consumer_of_another_name_gets_the_message_alone(harnesses):
    stored = held_part_then_restart(harnesses)
    assert sent_after_restart(harnesses, "other", 4) == stored


def test_a_consumer_of_another_client_gets_the_message_alone(harnesses):
    stored = held_part_then_restart(harnesses)
    assert sent_after_restart(harnesses, "c", 4, client="Pulsar-Java-v3.3.0") == stored


def test_after_a_kill_9_what_the_last_flush_recorded_is_kept(harnesses):
    stored = held_part_then_restart(harnesses, crash=True)
    assert sent_after_restart(harnesses, "c", 5) == stored[-1:] + stored


def test_a_kill_9_before_any_flush_loses_the_record(harnesses):
    """The window that remains: what a consumer began after the last flush."""
    stored = held_part_then_restart(harnesses, crash=True, flushed=False)
    assert sent_after_restart(harnesses, "c", 4) == stored


def test_a_consumer_its_client_closed_leaves_no_record(harnesses):
    h = harnesses()
    topic = h.topic()

    async def scenario() -> list[Position]:
        consumer = join(topic, "c", permits=2)
        stored = await publish(h, *chunks("u", 4))
        await sent_to(consumer, 2)
        consumer.leave_chunk_watch(keep=False)  # CLOSE_CONSUMER
        consumer.subscription.remove_consumer(consumer)
        return stored

    stored = h.run(scenario())
    topic.flush()
    assert topic.ml.get_property("chunk_contexts") is None
    h.close()
    assert sent_after_restart(harnesses, "c", 4) == stored


def test_without_its_last_chunk_stored_the_message_goes_twice_and_what_followed_after_it(harnesses):
    h = harnesses()

    async def before() -> list[Position]:
        consumer = join(h.topic(), "c", permits=100)
        stored = await publish(h, *chunks("u", 3)[:2], message(b"m1"))
        await sent_to(consumer, 3)
        return stored

    stored = h.run(before())
    h.close()
    h = harnesses()
    topic = h.topic()

    async def after() -> None:
        consumer = join(topic, "c", permits=100)
        assert await sent_to(consumer, 3) == stored
        rest = await publish(h, chunks("u", 3)[2], message(b"m2"))
        whole = [*stored[:2], rest[0]]
        assert ids(await sent_to(consumer, 8)) == ids([*stored, rest[0], *whole, rest[1]])

    h.run(after())
    topic.flush()
    assert topic.ml.get_property("chunk_contexts") is None, "taken, and nothing held any more"


@pytest.mark.parametrize("sub_type", [EXCLUSIVE, wire.CommandSubscribe.Shared], ids=["exclusive", "shared"])
def test_a_redelivery_of_everything_drops_what_was_queued_to_go_again(harnesses, sub_type: int):
    """A redelivery of all it holds (Exclusive: a rewind to the first unacknowledged entry) sends
    the message again anyway: what its watch had queued does not go as well."""
    h = harnesses()

    async def before() -> list[Position]:
        consumer = join(h.topic(), "c", permits=100, sub_type=sub_type)
        stored = await publish(h, *chunks("u", 3)[:2], message(b"m1"))
        await sent_to(consumer, 3)
        return stored

    stored = h.run(before())
    h.close()
    h = harnesses()

    async def after() -> None:
        consumer = join(h.topic(), "c", permits=3, sub_type=sub_type)
        assert await sent_to(consumer, 3) == stored
        rest = await publish(h, chunks("u", 3)[2], message(b"m2"))
        consumer.subscription.flow(consumer, 1)
        assert (await sent_to(consumer, 4))[3:] == rest[:1], (
            "its last chunk; the second pass waits for permits"
        )
        assert consumer.has_queued
        consumer.subscription.redeliver(consumer, [])
        consumer.subscription.flow(consumer, 100)
        marker = await publish(h, message(b"marker"))
        sent = await sent_to(consumer, 10)
        assert sent[4:] == [*stored, *rest, *marker], "from the cursor, once"

    h.run(after())
