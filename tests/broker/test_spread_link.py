"""A follower's link to a topic's owner (``magnetar.spread.link``) against a real broker in this
process: it subscribes as one broadcast consumer and says how far the topic is durable; what it
acknowledges is the owner's floor; a floor that goes back makes it subscribe again at the stored
cursor; given up, its place goes."""

from __future__ import annotations

import asyncio

from magnetar.broker.config import BrokerConfig
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
        self.owned_here = 0

    def on_durable(self, position: Position) -> None:
        self.durable.append(position)

    def on_stored_cursor(self, position: Position) -> None:
        self.stored.append(position)

    def on_owned_here(self) -> None:
        self.owned_here += 1


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
                link = OwnerLink(target, lambda: owner, "worker-1", poll_interval=0.05)
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
