"""Every MESSAGE sent for a partition of a partitioned topic carries the partition index in its
message id, as Pulsar's broker writes it (the official clients' readers compare it with the
partition of GET_LAST_MESSAGE_ID's answer); a topic that is no partition leaves it out."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.nonpersistent import NonPersistentTopic
from magnetar.protocol import FrameDecoder, wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.position import Position

from .entry_harness import TOPIC, FakeProducer, message
from .recording import RecordingCnx, sent_to

PARTITION = "persistent://public/default/parted-partition-2"


class PartitionRecordingCnx(RecordingCnx):
    """Also keeps each MESSAGE's message id as sent, with its partition (or none)."""

    def __init__(self) -> None:
        super().__init__()
        self.message_ids: list[wire.MessageIdData] = []
        self._ids = FrameDecoder(1 << 24)

    def write_many(self, frames: list[bytes]) -> None:
        self._ids.feed(b"".join(bytes(f) for f in frames))
        self.message_ids.extend(frame.command.message.message_id for frame in self._ids.frames())
        super().write_many(frames)


def subscribe(topic, consumer_id: int, sub_type: int, broadcast: bool = False) -> Consumer:
    cmd = wire.CommandSubscribe(
        topic=str(topic.name), subscription="s", sub_type=sub_type, consumer_id=consumer_id, request_id=0
    )
    if broadcast:
        cmd.metadata.add(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)
    consumer = topic.subscribe(lambda s: Consumer(PartitionRecordingCnx(), s, consumer_id, "c"), cmd)
    consumer.subscription.flow(consumer, 100)
    return consumer


def partitions_sent(consumer: Consumer) -> list[int | None]:
    """Each MESSAGE's partition, None where the message id has none."""
    ids = consumer.cnx.message_ids
    return [m.partition if m.HasField("partition") else None for m in ids]


@pytest.mark.parametrize(
    ("name", "expected"),
    [(PARTITION, 2), (TOPIC, None)],
    ids=["partition", "no-partition"],
)
@pytest.mark.parametrize("broadcast", [False, True], ids=["exclusive", "broadcast"])
def test_a_message_id_carries_the_partition_of_its_topic(harnesses, name, expected, broadcast):
    h = harnesses()
    topic = h.topic(name)

    async def scenario() -> None:
        sub_type = wire.CommandSubscribe.Shared if broadcast else wire.CommandSubscribe.Exclusive
        consumer = subscribe(topic, 1, sub_type, broadcast)
        assert isinstance(topic.subscriptions["s"].dispatcher, BroadcastDispatcher) is broadcast
        stored = [await h.publish_nowait(message(b"m%d" % i, seq=i), name) for i in range(2)]
        assert await sent_to(consumer, 2) == stored
        # Sent again (the full header, with a redelivery count): the partition still there.
        ids = [wire.MessageIdData(ledger_id=p.ledger_id, entry_id=p.entry_id) for p in stored]
        consumer.subscription.redeliver(consumer, ids)
        assert await sent_to(consumer, 4) == stored + stored
        assert [count for _, count in consumer.cnx.received] == [0, 0, 1, 1]
        assert partitions_sent(consumer) == [expected] * 4

    h.run(scenario())


@pytest.mark.parametrize(("name", "expected"), [("parted-partition-5", 5), ("plain", None)])
@pytest.mark.parametrize("broadcast", [False, True], ids=["exclusive", "broadcast"])
def test_a_non_persistent_message_id_carries_the_partition_too(name, expected, broadcast):
    topic = NonPersistentTopic(TopicName.parse(f"non-persistent://public/default/{name}"), BrokerConfig())
    consumer = subscribe(topic, 1, wire.CommandSubscribe.Exclusive, broadcast)
    sent: list[Position] = []
    for i in range(2):
        topic.publish(
            FakeProducer(),
            wire.CommandSend(producer_id=1, sequence_id=i),
            memoryview(message(b"m")),
            lambda p, _: sent.append(p),
        )
    assert consumer.cnx.positions() == sent and len(sent) == 2
    assert partitions_sent(consumer) == [expected] * 2
