"""A follower on real storage without a network (docs/architecture.md, the spread): a topic
written by its owner (a harness's PersistentTopic) and read by a follower over a second Storage
on the same files, whose link to the owner is a recording: what the follower's consumers
acknowledge goes to the owner as one floor, and what the owner says moves the follower."""

from __future__ import annotations

import pytest

from magnetar.broker.dispatchers.broadcast_lag import LagLimits
from magnetar.broker.errors import BrokerError, ConsumerBusy, NotAllowed
from magnetar.broker.follower_topic import FollowerSubscription, FollowerTopic
from magnetar.broker.ownership import LocalOwnership
from magnetar.broker.spread import Spread
from magnetar.protocol import wire
from magnetar.storage import Storage
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursors import VirtualCursorState

from ..waiting import eventually_async
from .recording import ack, sent_to
from .test_broadcast_dispatch import join, lose_connection, publish_numbered, subscribe_many


class RecordingLink:
    """The follower's link as a list of what it was told to acknowledge; what it asks of the
    owner is answered with ``owner_answer`` (a stored cursor, or a BrokerError raised)."""

    def __init__(self) -> None:
        self.acks: list[Position] = []
        self.closed: bool | None = None  # given up, or kept at the owner
        self.asked: list[wire.CommandSeek | str] = []
        self.owner_answer: Position | BrokerError = Position(-1, -1)

    def acknowledge(self, position: Position) -> None:
        self.acks.append(position)

    def close(self, give_up: bool) -> None:
        self.closed = give_up

    async def seek(self, seek: wire.CommandSeek) -> Position:
        self.asked.append(seek)
        if isinstance(self.owner_answer, BrokerError):
            raise self.owner_answer
        return self.owner_answer

    async def unsubscribe(self) -> None:
        self.asked.append("unsubscribe")
        if isinstance(self.owner_answer, BrokerError):
            raise self.owner_answer


@pytest.fixture
def follow(harnesses, tmp_path):
    """``follow(h, owner_topic, sub)``: a follower of the owner's topic (another Storage, as another
    worker has) following its subscription ``sub`` from the owner's stored cursor."""
    opened: list[Storage] = []

    def make(
        h, owner_topic, sub: str = "fans", worker: str = "worker-1", durable: bool = True
    ) -> tuple[FollowerSubscription, RecordingLink]:
        storage = Storage(
            h.config.storage_config(), notify=h.loop.call_soon_threadsafe, check_directories=False
        )
        opened.append(storage)
        ml = storage.follow_managed_ledger(str(owner_topic.name), worker)
        ml.follow(owner_topic.ml.last_confirmed)
        topic = FollowerTopic(owner_topic.name, ml, h.config)
        link = RecordingLink()
        stored = owner_topic.subscriptions[sub].cursor.mark_delete_position
        follower = topic.subscriptions[sub] = FollowerSubscription(
            topic, sub, ml.cursor_at(stored, sub), link, durable
        )
        return follower, link

    yield make
    for storage in opened:
        storage.close()


def tell(follower: FollowerSubscription, owner_topic) -> None:
    """What the link tells of each durable entry."""
    follower.on_durable(owner_topic.ml.last_confirmed)


def test_a_followers_consumers_get_what_the_owner_stores_and_the_owner_hears_their_floor(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)  # the owner serves a broadcast subscription: now it can be followed
        follower, link = follow(h, topic)
        here = [join(follower.topic, f"vehicle-{i}", i) for i in range(3)]
        stored = await publish_numbered(h, 4, *[])
        tell(follower, topic)
        for consumer in here:
            assert await sent_to(consumer, 4) == stored
        ack(here[0], *stored)
        ack(here[1], *stored)
        assert link.acks == []  # the slowest has acknowledged nothing
        ack(here[2], *stored[:2])
        assert link.acks == [stored[1]]  # one floor for the follower's consumers, not an ack each
        ack(here[2], *stored[2:])
        assert link.acks[-1] == stored[-1]
        assert follower.cursor.mark_delete_position < stored[-1]  # the stored cursor is the owner's

    on_topic(scenario)


def test_a_consumer_joining_behind_the_others_takes_the_floor_back(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, link = follow(h, topic)
        first = join(follower.topic, "vehicle-1", 1)
        stored = await publish_numbered(h, 3)
        tell(follower, topic)
        await sent_to(first, 3)
        ack(first, *stored)
        assert link.acks[-1] == stored[-1]
        # A newcomer starts at the subscription's stored cursor (the owner's): behind the floor told.
        late = join(follower.topic, "vehicle-2", 2)
        assert link.acks[-1] == follower.cursor.mark_delete_position < stored[0]
        assert await sent_to(late, 3) == stored

    on_topic(scenario)


def test_what_the_owner_acknowledges_for_everyone_reaches_the_followers_consumers(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, _ = follow(h, topic)
        vehicle = join(follower.topic, "vehicle-1", 1, permits=0)  # reads nothing yet
        stored = await publish_numbered(h, 5)
        tell(follower, topic)
        follower.on_stored_cursor(stored[2])  # a skip at the owner (clear-backlog, expiry ...)
        follower.flow(vehicle, 100)
        assert await sent_to(vehicle, 2) == stored[3:]

    on_topic(scenario)


def test_a_consumer_resumes_at_the_place_another_worker_kept_for_it(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        stored = await publish_numbered(h, 6)
        one, _ = follow(h, topic, worker="worker-1")
        tell(one, topic)
        moving = join(one.topic, "vehicle-7", 7)
        await sent_to(moving, 6)
        ack(moving, *stored[:4])
        one.topic.flush()  # its place written under worker-1's key
        lose_connection(moving)
        # Its next connection reached worker-2: the place worker-1 kept is found there.
        two, _ = follow(h, topic, worker="worker-2")
        tell(two, topic)
        back = join(two.topic, "vehicle-7", 7)
        assert await sent_to(back, 2) == stored[4:]
        assert two.dispatcher.stats()["adoptedVirtualCursors"] == 1
        # ... and at the owner too.
        owner_store = topic.ml.virtual_cursors_elsewhere("fans")
        assert owner_store.find("vehicle-7") == VirtualCursorState(stored[3])

    on_topic(scenario)


def test_after_a_seek_no_worker_resumes_a_consumer_at_a_place_stored_before_it(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        stored = await publish_numbered(h, 6)
        one, _ = follow(h, topic, worker="worker-1")
        tell(one, topic)
        moving = join(one.topic, "vehicle-7", 7)
        await sent_to(moving, 6)
        ack(moving, *stored[:4])
        one.topic.flush()  # its place written under worker-1's key, before any reset
        lose_connection(moving)
        # The owner reset the subscription once since (the spread's count: 1). Worker-1's place is
        # older than that: neither another worker nor the owner resumes the consumer there.
        two, _ = follow(h, topic, worker="worker-2")
        two.reset_epoch = 1
        tell(two, topic)
        back = join(two.topic, "vehicle-7", 7)
        assert await sent_to(back, 6) == stored  # from the stored cursor
        assert two.dispatcher.stats()["adoptedVirtualCursors"] == 0
        owner_store = topic.ml.virtual_cursors_elsewhere("fans")
        assert owner_store.find("vehicle-7", 1) is None
        assert owner_store.find("vehicle-7") == VirtualCursorState(stored[3])
        # What worker-2 stores now carries the count: taken by a worker that knows of the reset.
        ack(back, *stored[:2])
        two.topic.flush()
        assert owner_store.find("vehicle-7", 1) == VirtualCursorState(stored[1], epoch=1)

    on_topic(scenario)


def test_mqtts_subscription_is_followed_with_nothing_stored_and_kept_for_the_sweep(on_topic, follow):
    """MQTT's broadcast subscription is not durable (docs/mqtt.md): its follower writes no place
    for anyone, and it stays when its last consumer goes, its link with it, until the sweep
    closes them (a client subscribing again meanwhile opens nothing)."""

    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, link = follow(h, topic, durable=False)
        here = [join(follower.topic, f"vehicle-{i}", i) for i in range(2)]
        stored = await publish_numbered(h, 3)
        tell(follower, topic)
        for consumer in here:
            assert await sent_to(consumer, 3) == stored
            ack(consumer, *stored)
        assert link.acks[-1] == stored[-1]
        follower.topic.flush()
        elsewhere = topic.ml.virtual_cursors_elsewhere("fans")
        assert [elsewhere.find(c.name) for c in here] == [None, None]
        for consumer in here:
            follower.remove_consumer(consumer)
        assert follower.topic.subscriptions == {"fans": follower} and follower.idle
        assert link.closed is None

    on_topic(scenario)


def test_only_durable_broadcast_consumers_are_a_followers_and_only_the_owner_seeks(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, link = follow(h, topic)
        consumer = join(follower.topic, "vehicle-1", 1)
        with pytest.raises(NotAllowed):
            follower.reset_cursor(Position(0, 0))
        with pytest.raises(NotAllowed):
            follower.unsubscribe(consumer)
        with pytest.raises(NotAllowed):
            follower.topic.publish(None, None, memoryview(b""), lambda p, e: None)
        follower.topic.close(give_up=False)
        assert link.closed is False  # the owner keeps the link's place for its grace

    on_topic(scenario)


def test_a_followers_idle_subscriptions_are_told(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, _ = follow(h, topic)
        assert follower.idle
        (vehicle,) = subscribe_many(follower.topic, 1)
        assert not follower.idle
        lose_connection(vehicle)
        assert not follower.idle  # kept for its reconnect grace
        follower.dispatcher.drop_detached(vehicle.name)
        assert follower.idle and isinstance(follower.topic, FollowerTopic)

    on_topic(scenario)


def test_the_lag_policy_closes_a_followers_laggard(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, _ = follow(h, topic)
        slow, fast = subscribe_many(follower.topic, 2)
        stored = await publish_numbered(h, 5)
        tell(follower, topic)
        await sent_to(fast, 5)
        ack(fast, *stored)
        spread = Spread(h.config, LocalOwnership(), False, None, None, None, None, None)
        spread.followers[str(topic.name)] = follower.topic
        spread.sweep_lag(LagLimits(2, 0.0))
        assert slow.cnx.closed_consumers == [slow.consumer_id] and fast.cnx.closed_consumers == []
        assert follower.dispatcher.lag_disconnects == 1

    on_topic(scenario)


def test_a_reset_at_the_owner_starts_every_consumer_here_over_and_holds_the_floor(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, link = follow(h, topic)
        a, b = join(follower.topic, "vehicle-1", 1), join(follower.topic, "vehicle-2", 2)
        stored = await publish_numbered(h, 4)
        tell(follower, topic)
        for consumer in (a, b):
            await sent_to(consumer, 4)
            ack(consumer, *stored)
        follower.on_stored_cursor(stored[-1])  # the owner's stored cursor, as the link polls it
        told = len(link.acks)
        follower.on_reset(stored[0])  # a seek at the owner, found by the link subscribing again
        assert a.closed and b.closed  # closed by the broker: their clients subscribe again
        assert a.cnx.closed_consumers == [1] and b.cnx.closed_consumers == [2]
        back = join(follower.topic, "vehicle-1", 3)
        assert await sent_to(back, 3) == stored[1:]
        ack(back, *stored[1:])
        # vehicle-2 is not back yet: its place is kept at the reset's position, the floor with it.
        assert link.acks[told:] == []
        again = join(follower.topic, "vehicle-2", 4)
        assert await sent_to(again, 3) == stored[1:]
        ack(again, *stored[1:])
        assert link.acks[told:] == [stored[-1]]

    on_topic(scenario)


def test_a_seek_asked_here_is_done_by_the_owner_then_here(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, link = follow(h, topic)
        vehicle = join(follower.topic, "vehicle-1", 1)
        stored = await publish_numbered(h, 3)
        tell(follower, topic)
        await sent_to(vehicle, 3)
        ack(vehicle, *stored)
        answers: list[BrokerError | None] = []
        # Refused by the owner: refused here, nothing changes.
        link.owner_answer = NotAllowed("not a ledger of this topic")
        follower.seek(wire.CommandSeek(consumer_id=1, request_id=7, message_publish_time=5), answers.append)
        await eventually_async(lambda: len(answers) == 1, what="the refusal")
        assert isinstance(answers[0], NotAllowed) and not vehicle.closed
        # Done by the owner: every consumer here starts over at the owner's new stored cursor.
        link.owner_answer = stored[0]
        follower.seek(wire.CommandSeek(consumer_id=1, request_id=8, message_publish_time=5), answers.append)
        await eventually_async(lambda: len(answers) == 2, what="the answer")
        assert answers[1] is None and vehicle.closed
        assert [a.message_publish_time for a in link.asked if isinstance(a, wire.CommandSeek)] == [5, 5]
        back = join(follower.topic, "vehicle-1", 2)
        assert await sent_to(back, 2) == stored[1:]

    on_topic(scenario)


def test_an_unsubscribe_asked_here_is_done_by_the_owner_when_its_consumer_is_alone(on_topic, follow):
    async def scenario(h, topic) -> None:
        join(topic, "at-owner", 99)
        follower, link = follow(h, topic)
        a, b = join(follower.topic, "vehicle-1", 1), join(follower.topic, "vehicle-2", 2)
        answers: list[BrokerError | None] = []
        with pytest.raises(ConsumerBusy):
            follower.unsubscribe_at_owner(a, answers.append)
        assert link.asked == []
        b.subscription.remove_consumer(b)  # closed by its client
        link.owner_answer = BrokerError("busy at the owner", wire.ConsumerBusy)
        follower.unsubscribe_at_owner(a, answers.append)
        await eventually_async(lambda: len(answers) == 1, what="the owner's refusal")
        assert isinstance(answers[0], BrokerError) and answers[0].code == wire.ConsumerBusy
        assert "fans" in follower.topic.subscriptions and not a.closed
        link.owner_answer = Position(-1, -1)
        follower.unsubscribe_at_owner(a, answers.append)
        await eventually_async(lambda: len(answers) == 2, what="the owner's answer")
        assert answers[1] is None and link.asked == ["unsubscribe", "unsubscribe"]
        assert "fans" not in follower.topic.subscriptions
        assert link.closed is False  # its consumer went with the subscription at the owner
        assert a.cnx.closed_consumers == []  # it asked: answered, not closed

    on_topic(scenario)
