"""The broadcast dispatcher on a real topic and real storage, with many consumers whose
connections record what they are sent (no sockets: thousands of consumers in a second)."""

from __future__ import annotations

import pytest

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import ConsumerBusy
from magnetar.broker.subscription_type import SubscriptionType
from magnetar.protocol import wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE, wants_broadcast
from magnetar.storage.position import Position
from tests.waiting import eventually_async

from .entry_harness import batch, message
from .recording import RecordingCnx, ack, publish, sent_to

SHARED = wire.CommandSubscribe.Shared
EXCLUSIVE = wire.CommandSubscribe.Exclusive


def join(topic, name: str, consumer_id: int, sub: str = "fans", permits: int = 1000) -> Consumer:
    """A broadcast consumer ``name`` subscribing to ``sub``, with ``permits`` granted."""
    cmd = wire.CommandSubscribe(
        topic=str(topic.name), subscription=sub, sub_type=SHARED, consumer_id=consumer_id, request_id=0
    )
    cmd.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
    consumer = topic.subscribe(lambda s: Consumer(RecordingCnx(), s, consumer_id, name), cmd)
    consumer.subscription.flow(consumer, permits)
    return consumer


def subscribe_many(topic, n: int, sub: str = "fans", permits: int = 1000) -> list[Consumer]:
    return [join(topic, f"c{i}", i, sub, permits) for i in range(n)]


async def publish_numbered(h, n: int, *receivers: Consumer) -> list[Position]:
    """Store n messages and wait until the dispatcher has sent them all to each of ``receivers``."""
    before = [len(consumer.cnx.received) for consumer in receivers]
    stored = await publish(h, *[message(b"%d" % i, seq=i) for i in range(n)])
    for consumer, had in zip(receivers, before, strict=True):
        assert (await sent_to(consumer, had + n))[had:] == stored
    return stored


def test_the_property_asks_for_broadcast_in_either_field():
    cmd = wire.CommandSubscribe(topic="t", subscription="s", sub_type=SHARED, consumer_id=1, request_id=1)
    assert not wants_broadcast(cmd)
    cmd.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
    assert wants_broadcast(cmd)
    other = wire.CommandSubscribe(topic="t", subscription="s", sub_type=SHARED, consumer_id=1, request_id=1)
    other.subscription_properties.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
    assert wants_broadcast(other)
    other.subscription_properties[0].value = "broadcast-ish"
    assert not wants_broadcast(other)


def test_every_consumer_gets_every_entry_from_one_read_each(on_topic):
    async def scenario(h, topic) -> None:
        consumers = subscribe_many(topic, 2500)
        sub = topic.subscriptions["fans"]
        dispatcher = sub.dispatcher
        assert isinstance(dispatcher, BroadcastDispatcher) and sub.kind is SubscriptionType.Broadcast
        stored = [(await publish(h, message(b"m%d" % i, seq=i)))[0] for i in range(5)]
        for c in consumers:
            assert await sent_to(c, len(stored)) == stored
        # Each entry was read once for all 2,500 consumers (served in rounds of 1,000), not once
        # per consumer or per round.
        assert dispatcher.entries_read == len(stored)

    on_topic(scenario)


def test_a_round_writes_to_at_most_fanout_per_round_consumers(on_topic):
    async def scenario(h, topic) -> None:
        consumers = subscribe_many(topic, 30)
        dispatcher = topic.subscriptions["fans"].dispatcher
        dispatcher.fanout_per_round = 10
        # Count the consumers each dispatch round writes to.
        written: list[int] = []
        original = dispatcher.dispatch_round

        def counted() -> bool:
            before = sum(1 for c in consumers if c.cnx.received)
            more = original()
            written.append(sum(1 for c in consumers if c.cnx.received) - before)
            return more

        dispatcher.dispatch_round = counted
        await publish(h, message(b"x"))
        for c in consumers:
            assert len(await sent_to(c, 1)) == 1
        assert max(written) <= 10 and sum(written) == 30

    on_topic(scenario)


def test_the_subscription_keeps_what_its_slowest_consumer_has_not_acked(on_topic):
    async def scenario(h, topic) -> None:
        fast, slow = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 6, fast, slow)
        cursor = topic.subscriptions["fans"].cursor
        ack(fast, *stored)
        ack(slow, *stored[:2])
        assert cursor.mark_delete_position == stored[1]
        assert cursor.backlog() == 4
        ack(slow, stored[3])  # out of order: the slow one still lacks stored[2]
        assert cursor.mark_delete_position == stored[1]
        topic.subscriptions["fans"].remove_consumer(slow)
        assert cursor.mark_delete_position == stored[-1]
        assert cursor.backlog() == 0

    on_topic(scenario)


def lose_connection(consumer: Consumer) -> None:
    consumer.cnx.closed = True  # as a crashed client or a broker shutting down loses it
    consumer.subscription.remove_consumer(consumer)


def test_without_a_grace_period_a_lost_connection_releases_nothing_until_the_next_ack(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, slow, fast)
        ack(fast, *stored[:2])
        cursor = topic.subscriptions["fans"].cursor
        assert cursor.backlog() == 3
        lose_connection(slow)  # the cursor stays: a shutdown loses every connection, in any order
        assert cursor.backlog() == 3
        ack(fast, stored[2])
        assert cursor.backlog() == 0

    on_topic(scenario, broadcast_reconnect_grace_seconds=0)


def test_a_lost_consumer_keeps_its_virtual_cursor_until_the_grace_period_ends(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, slow, fast)
        ack(slow, stored[0])
        ack(fast, *stored)
        sub = topic.subscriptions["fans"]
        assert sub.cursor.backlog() == 2
        lose_connection(slow)
        ack(fast, *stored)  # acks of the others move nothing it holds
        assert sub.cursor.backlog() == 2
        assert sub.dispatcher.stats()["detachedCursors"] == 1
        # Given up once the grace period is over: the subscription moves on.
        await eventually_async(
            lambda: sub.cursor.backlog() == 0, what="the lost consumer's virtual cursor given up"
        )
        assert sub.dispatcher.stats()["detachedCursors"] == 0

    on_topic(scenario, broadcast_reconnect_grace_seconds=0.2)


def test_a_consumer_back_within_the_grace_period_resumes_at_its_virtual_cursor(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 4, slow, fast)
        ack(slow, stored[0], stored[2])  # stored[1] and stored[3] were in flight when it was lost
        ack(fast, *stored)
        lose_connection(slow)
        more = await publish_numbered(h, 1, fast)
        back = join(topic, slow.name, 50)
        # What it had not acknowledged first, then what came since; nothing it acknowledged.
        assert await sent_to(back, 3) == [stored[1], stored[3], *more]
        ack(back, stored[1], stored[3], *more)
        ack(fast, *more)
        assert topic.subscriptions["fans"].cursor.backlog() == 0
        # A consumer of another name starts at what the subscription holds, as always: the next
        # message is the first it is sent.
        other = join(topic, "someone-else", 51)
        latest = await publish_numbered(h, 1, back, fast)
        assert await sent_to(other, 1) == latest

    on_topic(scenario)


def test_a_consumer_closed_by_its_client_gives_up_its_virtual_cursor_at_once(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 2, slow, fast)
        ack(fast, *stored)
        sub = topic.subscriptions["fans"]
        assert sub.cursor.backlog() == 2
        sub.remove_consumer(slow)  # CLOSE_CONSUMER: the connection stays open
        assert sub.cursor.backlog() == 0
        back = join(topic, slow.name, 50)
        # Nothing of before: the next message is the first it is sent.
        latest = await publish_numbered(h, 1, fast)
        assert await sent_to(back, 1) == latest

    on_topic(scenario)


def test_skips_and_seeks_reach_the_virtual_cursors_kept_for_lost_consumers(on_topic):
    async def scenario(h, topic) -> None:
        slow, fast = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 2, slow, fast)
        lose_connection(slow)
        sub = topic.subscriptions["fans"]
        sub.clear_backlog()  # acknowledged for everyone, the detached one included
        ack(fast, *stored)
        more = await publish_numbered(h, 1, fast)
        back = join(topic, slow.name, 50)
        assert await sent_to(back, 1) == more
        lose_connection(back)
        assert sub.dispatcher.stats()["detachedCursors"] == 1
        sub.cursor.reset(stored[0])
        sub.dispatcher.on_cursor_reset()  # what a seek does after moving the cursor
        # Still kept for its grace, at the new position: back, it gets everything from there.
        assert sub.dispatcher.stats()["detachedCursors"] == 1
        again = join(topic, slow.name, 51)
        assert await sent_to(again, 3) == [*stored, *more]

    on_topic(scenario)


def test_a_seek_keeps_the_place_of_each_consumer_it_closed_until_it_is_back(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, a, b)
        ack(a, *stored)
        ack(b, *stored)
        sub = topic.subscriptions["fans"]
        sub.reset_cursor(stored[0])  # a seek: every consumer closed by the broker
        assert a.closed and b.closed
        back_a = join(topic, a.name, 10)
        assert await sent_to(back_a, 3) == stored
        ack(back_a, *stored)
        # b is not back yet: the subscription waits for it at the seek's position.
        assert sub.cursor.mark_delete_position < stored[0]
        back_b = join(topic, b.name, 11)
        assert await sent_to(back_b, 3) == stored
        ack(back_b, *stored)
        assert sub.cursor.mark_delete_position == stored[-1]

    on_topic(scenario)


def test_a_newcomer_starts_at_what_the_subscription_still_holds(on_topic):
    async def scenario(h, topic) -> None:
        (first,) = subscribe_many(topic, 1)
        stored = await publish_numbered(h, 4, first)
        ack(first, *stored[:2])
        late = join(topic, "late", 99, permits=100)
        assert await sent_to(late, 2) == stored[2:]
        assert first.cnx.positions() == stored  # nothing sent twice to the first

    on_topic(scenario)


def test_redelivery_goes_to_the_consumer_that_asked_only(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, a, b)
        sub = topic.subscriptions["fans"]
        redeliver_id = wire.MessageIdData(ledger_id=stored[1].ledger_id, entry_id=stored[1].entry_id)
        sub.redeliver(a, [redeliver_id])
        await sent_to(a, 4)
        assert a.cnx.received == [(p, 0) for p in stored] + [(stored[1], 1)]
        # Everything not acked, for b: all three again, in order, counted (and a's redelivery
        # before them was not b's).
        sub.redeliver(b, [])
        await sent_to(b, 6)
        assert b.cnx.received == [(p, 0) for p in stored] + [(p, 1) for p in stored]
        assert len(a.cnx.received) == 4

    on_topic(scenario)


def test_permits_bound_each_consumer_on_its_own(on_topic):
    async def scenario(h, topic) -> None:
        (small,) = subscribe_many(topic, 1, permits=2)
        (large,) = subscribe_many(topic, 1, permits=100)
        stored = await publish_numbered(h, 5, large)  # the entries small has no permits for were read
        assert small.cnx.positions() == stored[:2]
        small.subscription.flow(small, 10)
        assert await sent_to(small, 5) == stored

    on_topic(scenario)


class DoneAsWritten(Consumer):
    """A consumer that takes its entries its own way and is done with each as it is written, so it
    is never charged permits for them (an MQTT subscriber's QoS 0 entries: mqtt/outbound.py)."""

    takes_frames = False

    def send_own_way(self, entries: list[DispatchEntry]) -> tuple[int, int]:
        for entry in entries:
            self.cnx.received.append((entry.position, 0))
            position = entry.position
            self.subscription.acknowledge_one(self, False, position.ledger_id, position.entry_id)
        return sum(e.num_messages for e in entries), sum(len(e.data) for e in entries)


def test_a_consumer_not_charged_for_what_it_is_sent_goes_on_past_its_permits(on_topic):
    """Batch entries of 6 messages and 10 permits: a round sends the two entries the permits
    reach; a consumer that was not charged for them still has its permits, and no FLOW will come
    to wake it, so the next round sends it the rest."""

    async def scenario(h, topic) -> None:
        cmd = wire.CommandSubscribe(
            topic=str(topic.name), subscription="fans", sub_type=SHARED, consumer_id=1, request_id=0
        )
        cmd.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
        consumer = topic.subscribe(lambda s: DoneAsWritten(RecordingCnx(), s, 1, "own-way"), cmd)
        stored = await publish(h, *[batch([b"%d" % i] * 6, seq=6 * i) for i in range(5)])
        consumer.subscription.flow(consumer, 10)  # one read of all five entries: 30 messages
        assert await sent_to(consumer, len(stored)) == stored
        assert consumer.permits == 10

    on_topic(scenario)


def test_a_blocked_connection_waits_and_resumes_where_it_stopped(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        b.cnx.writable = False
        stored = await publish_numbered(h, 3, a)
        assert b.cnx.positions() == []
        b.cnx.writable = True
        b.subscription.dispatcher.on_writable(b)
        assert await sent_to(b, 3) == stored

    on_topic(scenario)


def test_skipping_the_backlog_moves_every_consumer(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2, permits=1)
        stored = await publish(h, *[message(b"%d" % i, seq=i) for i in range(4)])
        assert await sent_to(a, 1) == stored[:1]
        assert await sent_to(b, 1) == stored[:1]
        sub = topic.subscriptions["fans"]
        sub.clear_backlog()
        assert sub.cursor.backlog() == 0
        assert a.pending_acks == {} and b.pending_acks == {}
        a.subscription.flow(a, 10)
        (stored2,) = await publish(h, message(b"new", seq=10))
        assert await sent_to(a, 2) == [stored[0], stored2]  # nothing skipped is sent

    on_topic(scenario)


def test_cumulative_and_batch_index_acks(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        (first,) = await publish(h, batch([b"x", b"y", b"z"], seq=0))
        (second,) = await publish(h, message(b"w", seq=3))
        for consumer in (a, b):
            assert await sent_to(consumer, 2) == [first, second]
        sub = topic.subscriptions["fans"]
        ack(a, second, cumulative=True)
        assert sub.dispatcher.virtual_cursor(a).mark_delete == second
        # b acks two of the batch's three messages, then asks for everything again.
        part = wire.CommandAck(consumer_id=b.consumer_id, ack_type=wire.CommandAck.Individual)
        part.message_id.add(ledger_id=first.ledger_id, entry_id=first.entry_id, ack_set=[0b100], batch_size=3)
        sub.acknowledge(part, b)
        assert sub.cursor.mark_delete_position < first
        sub.redeliver(b, [])
        # The batch comes again with its ack set: only message 2 is left for b.
        assert await sent_to(b, 4) == [first, second, first, second]
        part.message_id[0].ack_set[:] = [0]
        sub.acknowledge(part, b)
        ack(b, second)
        assert sub.cursor.mark_delete_position == second

    on_topic(scenario)


def test_a_plain_consumer_cannot_join_a_broadcast_subscription_in_use(on_topic):
    async def scenario(h, topic) -> None:
        subscribe_many(topic, 1)
        cmd = wire.CommandSubscribe(
            topic=str(topic.name), subscription="fans", sub_type=SHARED, consumer_id=7, request_id=0
        )
        with pytest.raises(ConsumerBusy, match="Broadcast"):
            topic.subscribe(lambda s: Consumer(RecordingCnx(), s, 7, "plain"), cmd)
        # ... and broadcast consumers may declare any type, even a second Exclusive one.
        subscribe_exclusive = wire.CommandSubscribe(
            topic=str(topic.name), subscription="fans", sub_type=EXCLUSIVE, consumer_id=8, request_id=0
        )
        subscribe_exclusive.subscription_properties.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
        topic.subscribe(lambda s: Consumer(RecordingCnx(), s, 8, "x1"), subscribe_exclusive)
        subscribe_exclusive.consumer_id = 9
        topic.subscribe(lambda s: Consumer(RecordingCnx(), s, 9, "x2"), subscribe_exclusive)
        assert len(topic.subscriptions["fans"].consumers) == 3

    on_topic(scenario)


def test_the_end_of_a_terminated_topic_is_told_per_consumer(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 2, a, b)
        await topic.terminate()
        ack(a, *stored)
        told = wire.BaseCommand.REACHED_END_OF_TOPIC
        assert [c.type for c in a.cnx.commands] == [told]
        assert b.cnx.commands == []
        ack(b, *stored)
        assert [c.type for c in b.cnx.commands] == [told]

    on_topic(scenario)


def test_acks_and_redeliveries_of_unknown_entries_change_nothing(on_topic):
    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, a, b)
        sub = topic.subscriptions["fans"]
        beyond = Position(stored[-1].ledger_id, stored[-1].entry_id + 5)
        ack(a, beyond)
        ack(a, beyond, cumulative=True)
        sub.redeliver(a, [wire.MessageIdData(ledger_id=beyond.ledger_id, entry_id=beyond.entry_id)])
        assert sub.dispatcher.virtual_cursor(a).mark_delete < stored[0]
        assert sub.cursor.backlog() == 3
        # ... and the consumer goes on as before: the next message is the next it is sent,
        # nothing extra before it.
        later = await publish_numbered(h, 1, b)
        assert await sent_to(a, 4) == stored + later
        assert len(a.pending_acks) == 4
        ack(a, *stored, *later)
        ack(b, *stored, *later)
        assert sub.cursor.backlog() == 0

    on_topic(scenario)
