"""A follower's link to a topic's owner (``magnetar.spread.link``) against a real broker in this
process: it subscribes as one broadcast consumer and says how far the topic is durable; what it
acknowledges is the owner's floor; a floor that goes back makes it subscribe again at the stored
cursor; given up, its place goes. A seek it asks is done by the owner, where it subscribes again;
a reset the owner noted reaches the follower when the link subscribes again."""

from __future__ import annotations

import asyncio

from magnetar.broker.config import BrokerConfig
from magnetar.broker.follower_topic import MQTT_SUBSCRIBERS
from magnetar.broker.ownership import BrokerInfo
from magnetar.broker.spread import LinkTarget
from magnetar.cli.standalone import Standalone
from magnetar.client.aio import Client, ConsumerType
from magnetar.protocol import wire
from magnetar.spread.link import OwnerLink
from magnetar.storage.position import Position
from tests.waiting import eventually_async

TOPIC = "persistent://public/default/link"


class Events:
    def __init__(self) -> None:
        self.durable: list[Position] = []
        self.stored: list[Position] = []
        self.resets: list[Position] = []
        self.owned_here = 0
        #: Whether no consumer is connected to the follower (the link then closes when the owner
        #: closes its consumer), and each such close told (with its reset).
        self.idle = False
        self.closed_by_owner: list[bool] = []

    def on_durable(self, position: Position) -> None:
        self.durable.append(position)

    def on_stored_cursor(self, position: Position) -> None:
        self.stored.append(position)

    def on_reset(self, position: Position) -> None:
        self.resets.append(position)

    def on_owned_here(self) -> None:
        self.owned_here += 1

    def on_closed_by_owner(self, reset: bool) -> bool:
        self.closed_by_owner.append(reset)
        return self.idle


def test_a_link_follows_the_owner_and_holds_its_stored_cursor(tmp_path):
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)

    async def scenario() -> None:
        standalone = Standalone(config)
        await standalone.start()
        broker = standalone.broker
        owner = BrokerInfo("worker-0", broker.service_url)
        try:
            async with Client(broker.service_url) as client:
                there = await client.subscribe(
                    TOPIC, "fans", consumer_type=ConsumerType.Broadcast, consumer_name="o"
                )
                producer = await client.create_producer(TOPIC)
                first = [await producer.send(b"before") for _ in range(2)]
                target = LinkTarget(TOPIC, "fans", "magnetar.spread.worker-1", wire.CommandSubscribe.Latest)
                link = OwnerLink(target, lambda: owner, "worker-1", lambda: 0, poll_interval=0.05)
                last, stored = await link.start()
                assert last == Position(first[-1].ledger_id(), first[-1].entry_id()) and stored.entry_id == -1
                events = Events()
                link.attach(events)
                assert events.durable == [last]  # what it knew before, told at once
                sent = [await producer.send(f"m{i}".encode()) for i in range(3)]
                positions = [Position(m.ledger_id(), m.entry_id()) for m in sent]
                await eventually_async(lambda: events.durable[-1] == positions[-1], what="every entry told")

                subscription = broker.topics[TOPIC].subscriptions["fans"]
                for message in [await there.receive() for _ in range(5)]:
                    await there.acknowledge(message)
                link.acknowledge(positions[1])  # the follower's slowest consumer
                await eventually_async(
                    lambda: subscription.cursor.mark_delete_position == positions[1],
                    what="the floor at the owner",
                )
                link.acknowledge(positions[0])  # a consumer joined the follower behind: back
                await eventually_async(lambda: link.rejoins == 1, what="the link subscribed again")
                assert subscription.cursor.mark_delete_position == positions[1]  # never back
                await eventually_async(
                    lambda: events.stored[-1] == positions[1], what="the stored cursor told"
                )
                link.acknowledge(positions[2])
                await eventually_async(
                    lambda: subscription.cursor.mark_delete_position == positions[2], what="forward again"
                )
                link.close(give_up=True)
                await eventually_async(
                    lambda: len(subscription.consumers) == 1,
                    what="the link's consumer closed, its place given up",
                )
                assert events.owned_here == 0
        finally:
            await standalone.stop()

    asyncio.run(scenario())


def test_a_link_seeks_at_the_owner_and_finds_the_owners_resets(tmp_path):
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)

    async def scenario() -> None:
        standalone = Standalone(config)
        await standalone.start()
        broker = standalone.broker
        owner = BrokerInfo("worker-0", broker.service_url)
        noted = [0]  # the owner's resets of the subscription, as the shared store counts them
        try:
            async with Client(broker.service_url) as client:
                await client.subscribe(TOPIC, "fans", consumer_type=ConsumerType.Broadcast, consumer_name="o")
                producer = await client.create_producer(TOPIC)
                sent = [await producer.send(f"m{i}".encode()) for i in range(3)]
                positions = [Position(m.ledger_id(), m.entry_id()) for m in sent]
                target = LinkTarget(TOPIC, "fans", "magnetar.spread.worker-1", wire.CommandSubscribe.Latest)
                link = OwnerLink(target, lambda: owner, "worker-1", lambda: noted[0], poll_interval=0.05)
                await link.start()
                events = Events()
                link.attach(events)
                subscription = broker.topics[TOPIC].subscriptions["fans"]
                link.acknowledge(positions[-1])
                await eventually_async(
                    lambda: subscription.dispatcher.stats()["virtualCursors"] == 2, what="both consumers"
                )
                # Asked by a follower's consumer: the owner resets; the link is its consumer again.
                seek = wire.CommandSeek(consumer_id=99, request_id=1)
                seek.message_id.CopyFrom(wire.MessageIdData(ledger_id=positions[1].ledger_id, entry_id=1))
                stored = await link.seek(seek)
                assert stored == positions[0] == subscription.cursor.mark_delete_position
                names = [c.name for c in subscription.consumers]
                assert "magnetar.spread.worker-1" in names and events.resets == []
                # Done at the owner (noted first, as spread.watch_resets does): found on subscribing again.
                noted[0] += 1
                subscription.reset_cursor(positions[2])
                await eventually_async(lambda: events.resets == [positions[1]], what="the reset told")
                assert link.reconnects == 1
                # Closed by the owner without a reset (an unload): no reset told.
                for consumer in list(subscription.consumers):
                    if consumer.name.startswith("magnetar.spread."):
                        consumer.disconnect()
                await eventually_async(lambda: link.reconnects == 2, what="subscribed again")
                assert events.resets == [positions[1]]
                assert events.closed_by_owner == [True, False]  # (the seek's own close is not told)
                # Closed by the owner while the follower has no consumer connected: it lets go.
                events.idle = True
                noted[0] += 1  # as an UNSUBSCRIBE past idle links notes it
                for consumer in list(subscription.consumers):
                    if consumer.name.startswith("magnetar.spread."):
                        consumer.close_by_broker()
                        subscription.remove_consumer_silently(consumer)
                await eventually_async(lambda: events.closed_by_owner == [True, False, True], what="told")
                assert link.closed and link.reconnects == 2  # closed: it subscribes nowhere again
                assert [c.name for c in subscription.consumers] == ["o"]
                link.close(give_up=True)
        finally:
            await standalone.stop()

    asyncio.run(scenario())


def test_a_link_to_mqtts_subscription_made_anew_starts_at_the_followers_floor(tmp_path):
    """MQTT's broadcast subscription is not durable: its link's consumer is not either, and the
    subscription goes with its last consumer (the owner restarting, the bundle moving). Made anew
    by the link subscribing again, it starts where the follower's slowest consumer is, not at the
    end of the topic: the follower's clients miss nothing meanwhile."""
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)

    async def scenario() -> None:
        standalone = Standalone(config)
        await standalone.start()
        broker = standalone.broker
        owner = BrokerInfo("worker-0", broker.service_url)
        try:
            async with Client(broker.service_url) as client:
                producer = await client.create_producer(TOPIC)
                target = LinkTarget(
                    TOPIC, MQTT_SUBSCRIBERS, "magnetar.spread.worker-1", wire.CommandSubscribe.Latest, False
                )
                link = OwnerLink(target, lambda: owner, "worker-1", lambda: 0, poll_interval=0.05)
                await link.start()
                events = Events()
                link.attach(events)
                topic = broker.topics[TOPIC]
                assert not topic.subscriptions[MQTT_SUBSCRIBERS].durable
                sent = [await producer.send(f"m{i}".encode()) for i in range(3)]
                positions = [Position(m.ledger_id(), m.entry_id()) for m in sent]
                await eventually_async(lambda: events.durable[-1] == positions[-1], what="every entry told")
                link.acknowledge(positions[0])  # the follower's slowest consumer has the first only
                (consumer,) = topic.subscriptions[MQTT_SUBSCRIBERS].consumers
                consumer.disconnect()  # its only consumer: the subscription goes with it
                assert MQTT_SUBSCRIBERS not in topic.subscriptions
                await eventually_async(lambda: link.reconnects == 1, what="subscribed again")
                made = topic.subscriptions[MQTT_SUBSCRIBERS]
                assert not made.durable and made.cursor.mark_delete_position < positions[1]
                assert events.stored[-1] < positions[1]  # the follower's consumers skip nothing
                link.close(give_up=True)
                await eventually_async(
                    lambda: MQTT_SUBSCRIBERS not in topic.subscriptions, what="gone with the link"
                )
        finally:
            await standalone.stop()

    asyncio.run(scenario())
