"""A Shared or Key_Shared subscription's redeliveries of entries that retention trimmed since (a
non-durable subscription holds no retention, as in Pulsar): the trimmed ones are gone and passed
over, the consumer gets the rest, and the dispatcher goes on. On a real topic and real storage,
with consumers whose connections record what they are sent (no sockets)."""

from __future__ import annotations

import pytest

from magnetar.broker.consumer import Consumer
from magnetar.protocol import wire
from magnetar.storage.position import Position
from tests.waiting import eventually_async

from .entry_harness import message
from .recording import RecordingCnx, publish, sent_to


def join_non_durable(topic, consumer_id: int, permits: int, sub_type: int) -> Consumer:
    cmd = wire.CommandSubscribe(
        topic=str(topic.name),
        subscription="shared",
        sub_type=sub_type,
        consumer_id=consumer_id,
        request_id=0,
        durable=False,
    )
    consumer = topic.subscribe(lambda s: Consumer(RecordingCnx(), s, consumer_id, f"c{consumer_id}"), cmd)
    consumer.subscription.flow(consumer, permits)
    return consumer


def redeliver(consumer: Consumer, positions: list[Position]) -> None:
    ids = [wire.MessageIdData(ledger_id=p.ledger_id, entry_id=p.entry_id) for p in positions]
    consumer.subscription.redeliver(consumer, ids)


@pytest.mark.parametrize(
    "sub_type", [wire.CommandSubscribe.Shared, wire.CommandSubscribe.Key_Shared], ids=["Shared", "Key_Shared"]
)
def test_a_redelivery_passes_over_the_entries_trimmed_since_and_sends_the_rest(on_topic, sub_type):
    async def scenario(h, topic) -> None:
        consumer = join_non_durable(topic, 1, permits=1000, sub_type=sub_type)
        # Entries of ~1 KiB in ledgers of 2 KiB: a new ledger every two entries or so.
        stored = []
        for i in range(12):
            stored += await publish(h, message(b"m%02d-" % i + b"." * 1000))
        assert await sent_to(consumer, len(stored)) == stored
        ledgers = sorted({p.ledger_id for p in stored})
        assert len(ledgers) >= 3, ledgers
        trimmed = topic.ml.trim(0, 0)  # no durable cursor: every closed ledger counts as consumed
        assert trimmed and ledgers[-1] not in trimmed, trimmed
        gone = [p for p in stored if p.ledger_id in trimmed]
        kept = [p for p in stored if p.ledger_id not in trimmed]
        assert gone and kept

        redeliver(consumer, stored)  # asks for all: the trimmed ones first
        received = consumer.cnx.received
        await eventually_async(
            lambda: len(received) >= 2 * len(stored) - len(gone), what="the rest sent again"
        )
        again = received[len(stored) :]
        assert again == [(p, 1) for p in kept], "only what is still stored, once, as a redelivery"
        assert not topic.subscriptions["shared"].dispatcher.replay, "nothing left waiting"

        # The dispatcher goes on: a new entry is sent as usual.
        count = len(received)
        (later,) = await publish(h, message(b"later"))
        assert (await sent_to(consumer, count + 1))[count:] == [later]

    on_topic(scenario, max_ledger_size_bytes=2048)
