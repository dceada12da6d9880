"""Broadcast consumers' durable virtual cursors on a real topic and real storage: written together
once per flush round, and resumed under the consumer's name after a clean stop or a crash."""

from __future__ import annotations

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor
from magnetar.protocol import wire
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursors import VirtualCursorState
from tests.waiting import eventually_async

from .recording import RecordingCnx, ack, sent_to
from .test_broadcast_dispatch import join, lose_connection, publish_numbered, subscribe_many


def test_a_virtual_cursor_stores_and_restores_what_it_acknowledged():
    vc = VirtualCursor(Position(1, 2), Position(1, 6))
    vc.ack(Position(1, 4))
    assert not vc.ack_batch_indexes(Position(1, 5), [0b110], 3)
    state = vc.state()
    assert state == VirtualCursorState(Position(1, 2), (Position(1, 4),), ((Position(1, 5), (0b110,)),))
    back = VirtualCursor.from_state(state, Position(1, 3))
    assert back.is_acked(Position(1, 4)) and not back.is_acked(Position(1, 3))
    assert back.batch_ack_set(Position(1, 5)) == [0b110]
    assert back.restored_until == Position(1, 4)


def _acks_per_consumer(stored: list[Position], i: int) -> list[Position]:
    """Consumer i acknowledged a prefix of its own length and, for odd i, also the last entry."""
    acked = stored[: i % len(stored)]
    if i % 2:
        acked = [*acked, stored[-1]]
    return acked


def _expected(stored: list[Position], i: int) -> list[Position]:
    acked = set(_acks_per_consumer(stored, i))
    return [p for p in stored if p not in acked]


def test_many_virtual_cursors_take_one_storage_write_per_flush_and_survive_a_clean_stop(harnesses):
    h = harnesses()

    async def before(h, topic) -> list[Position]:
        consumers = subscribe_many(topic, 200)
        stored = await publish_numbered(h, 6, *consumers)
        for i, consumer in enumerate(consumers):
            if acked := _acks_per_consumer(stored, i):
                ack(consumer, *acked)
        writes = h.storage.metadata.virtual_cursor_writes
        topic.flush()
        assert h.storage.metadata.virtual_cursor_writes == writes + 1  # 200 virtual cursors, one write
        stats = topic.subscriptions["fans"].dispatcher.stats()
        assert stats["virtualCursorsWritten"] == 200 and stats["virtualCursorFlushes"] == 1
        topic.flush()
        assert h.storage.metadata.virtual_cursor_writes == writes + 1  # nothing changed since
        return stored

    stored = h.run(before(h, h.topic()))
    h.close()  # SIGTERM: consumers still connected
    again = harnesses()

    async def after(h, topic) -> None:
        consumers = [join(topic, f"c{i}", i) for i in range(200)]
        for i, consumer in enumerate(consumers):
            want = _expected(stored, i)
            assert await sent_to(consumer, len(want)) == want
        await publish_numbered(h, 1, *consumers)  # the next one each is sent: nothing came twice
        # The stored cursor still follows the slowest: consumer 0 acknowledged nothing.
        assert topic.subscriptions["fans"].cursor.mark_delete_position < stored[0]

    again.run(after(again, again.topic()))


def test_after_a_crash_virtual_cursors_are_as_of_the_last_flush(harnesses):
    h = harnesses()

    async def before(h, topic) -> list[Position]:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 5, a, b)
        ack(a, *stored[:3])
        ack(b, stored[0], stored[2])
        topic.flush()
        ack(a, stored[3])  # after the last flush: lost by the crash, sent again
        ack(b, stored[1])
        return stored

    stored = h.run(before(h, h.topic()))
    h.crash()  # kill -9
    again = harnesses()

    async def after(h, topic) -> None:
        a, b = join(topic, "c0", 0), join(topic, "c1", 1)
        assert await sent_to(a, 2) == stored[3:]
        assert await sent_to(b, 3) == [stored[1], stored[3], stored[4]]

    again.run(after(again, again.topic()))


def test_a_stored_virtual_cursor_not_taken_back_within_the_grace_period_is_given_up(harnesses):
    h = harnesses(broadcast_reconnect_grace_seconds=0.3)

    async def before(h, topic) -> list[Position]:
        gone, stays = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, gone, stays)
        ack(stays, *stored)
        return stored

    stored = h.run(before(h, h.topic()))
    h.close()
    again = harnesses(broadcast_reconnect_grace_seconds=0.3)

    async def after(h, topic) -> None:
        stays = join(topic, "c1", 1)
        sub = topic.subscriptions["fans"]
        assert sub.dispatcher.stats()["detachedCursors"] == 1  # c0's stored one holds the backlog
        assert sub.cursor.backlog() == 3
        await eventually_async(lambda: sub.cursor.backlog() == 0, what="c0's virtual cursor given up")
        topic.flush()
        assert set(topic.ml.virtual_cursors("fans").load()) == {"c1"}
        late = join(topic, "c0", 0)  # too late: starts where the subscription is
        more = await publish_numbered(h, 1, stays, late)
        assert late.cnx.positions() == more and not set(more) & set(stored)

    again.run(after(again, again.topic()))


def test_a_seek_resets_the_stored_virtual_cursors(harnesses):
    h = harnesses()

    async def scenario(h, topic) -> None:
        a, b = subscribe_many(topic, 2)
        stored = await publish_numbered(h, 3, a, b)
        ack(a, *stored)
        topic.flush()
        sub = topic.subscriptions["fans"]
        lose_connection(a)  # kept detached, stored
        sub.cursor.reset(stored[0])
        sub.dispatcher.on_cursor_reset()  # what a seek does after moving the cursor
        topic.flush()
        # Only the connected one's, at the new position: the detached one's is gone.
        assert topic.ml.virtual_cursors("fans").load() == {
            "c1": VirtualCursorState(sub.cursor.mark_delete_position)
        }
        back: Consumer = join(topic, "c0", 10)
        assert await sent_to(back, 3) == stored

    h.run(scenario(h, h.topic()))


def test_unsubscribing_deletes_the_virtual_cursors(harnesses):
    h = harnesses()

    async def scenario(h, topic) -> None:
        (only,) = subscribe_many(topic, 1)
        stored = await publish_numbered(h, 2, only)
        ack(only, stored[0])
        topic.flush()
        assert set(topic.ml.virtual_cursors("fans").load()) == {"c0"}
        only.subscription.unsubscribe(only)
        assert h.storage.metadata.virtual_cursor_buckets(topic.ml._id, "fans") == []

    h.run(scenario(h, h.topic()))


def test_a_subscription_that_changes_kind_drops_its_virtual_cursors(harnesses):
    h = harnesses()

    async def scenario(h, topic) -> None:
        (only,) = subscribe_many(topic, 1)
        stored = await publish_numbered(h, 2, only)
        ack(only, stored[0])
        topic.flush()
        lose_connection(only)  # kept detached, and stored
        assert set(topic.ml.virtual_cursors("fans").load()) == {"c0"}
        cmd = wire.CommandSubscribe(
            topic=str(topic.name),
            subscription="fans",
            sub_type=wire.CommandSubscribe.Exclusive,
            consumer_id=9,
        )
        topic.subscribe(lambda s: Consumer(RecordingCnx(), s, 9, "plain"), cmd)
        topic.flush()
        assert topic.ml.virtual_cursors("fans").load() == {}

    h.run(scenario(h, h.topic()))
