"""Chunked messages on Shared and Key_Shared subscriptions, on a real topic and real storage, with
consumers whose connections record what they are sent (no sockets).

Every chunk of a message reaches the consumer its first chunk went to, in order; while that
consumer has no permits only its message waits, and the other consumers go on; a consumer
leaving, or asking for any chunk again, gives the whole message to one consumer from its first
chunk."""

from __future__ import annotations

from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.sticky_keys import sticky_key_hash
from magnetar.protocol import wire
from magnetar.storage.position import Position
from tests.waiting import eventually_async

from .entry_harness import chunk, message
from .recording import RecordingCnx, ack, publish, sent_to

SHARED = wire.CommandSubscribe.Shared
KEY_SHARED = wire.CommandSubscribe.Key_Shared

#: With AUTO_SPLIT the first consumer holds every hash; the second takes 32768..65535.
MOVES = next(k for k in (f"k{i}" for i in range(1000)) if sticky_key_hash(k.encode()) >= 32768)
STAYS = next(k for k in (f"k{i}" for i in range(1000)) if sticky_key_hash(k.encode()) < 32768)


def join(topic, name: str, consumer_id: int, permits: int, sub_type: int = SHARED) -> Consumer:
    cmd = wire.CommandSubscribe(
        topic=str(topic.name), subscription="sub", sub_type=sub_type, consumer_id=consumer_id, request_id=0
    )
    consumer = topic.subscribe(lambda s: Consumer(RecordingCnx(), s, consumer_id, name), cmd)
    consumer.subscription.flow(consumer, permits)
    return consumer


def chunks_of(uuid: str, n: int, key: str | None = None) -> list[bytes]:
    return [chunk(b"%s-%d" % (uuid.encode(), i), uuid, i, n, key=key) for i in range(n)]


def redeliver(consumer: Consumer, *positions: Position) -> None:
    ids = [wire.MessageIdData(ledger_id=p.ledger_id, entry_id=p.entry_id) for p in positions]
    consumer.subscription.redeliver(consumer, ids)


def test_shared_a_consumer_without_permits_holds_back_only_its_own_message(on_topic):
    async def scenario(h, topic) -> None:
        slow = join(topic, "slow", 1, permits=1)  # takes the first chunk, then has no permits
        datas = []
        for i, part in enumerate(chunks_of("big", 4)):
            datas += [part, message(b"small-%d" % i)]
        stored = await publish(h, *datas)
        big, small = stored[0::2], stored[1::2]
        assert await sent_to(slow, 1) == big[:1]
        fast = join(topic, "fast", 2, permits=100)
        assert await sent_to(fast, len(small)) == small, "everything else went on to the other consumer"
        assert slow.cnx.positions() == big[:1]
        slow.subscription.flow(slow, 10)
        assert await sent_to(slow, len(big)) == big, "the rest of its message, in order"
        assert fast.cnx.positions() == small

    on_topic(scenario)


def test_shared_more_waiting_chunks_than_one_read_do_not_stop_the_others(on_topic):
    async def scenario(h, topic) -> None:
        slow = join(topic, "slow", 1, permits=1)
        fast = join(topic, "fast", 2, permits=1000)
        big = await publish(h, *chunks_of("big", 250))  # two and a half reads' worth
        small = await publish(h, *[message(b"s%d" % i) for i in range(30)])
        assert await sent_to(fast, len(small)) == small
        assert slow.cnx.positions() == big[:1]
        slow.subscription.flow(slow, 1000)
        assert await sent_to(slow, len(big)) == big

    on_topic(scenario, dispatcher_max_read_batch=100)


def test_shared_a_consumer_leaving_mid_message_gives_the_whole_message_to_another(on_topic):
    async def scenario(h, topic) -> None:
        leaving = join(topic, "leaving", 1, permits=2)
        stored = await publish(h, *chunks_of("big", 4))
        assert await sent_to(leaving, 2) == stored[:2]
        staying = join(topic, "staying", 2, permits=100)
        extra = await publish(h, message(b"after"))
        assert await sent_to(staying, 1) == extra, "the message's other chunks wait for its consumer"
        leaving.subscription.remove_consumer(leaving)
        assert await sent_to(staying, 5) == extra + stored, "from its first chunk, in order"

    on_topic(scenario)


def test_shared_a_redelivery_naming_one_chunk_sends_every_chunk_again_in_order(on_topic):
    async def scenario(h, topic) -> None:
        consumer = join(topic, "only", 1, permits=100)
        stored = await publish(h, message(b"before"), *chunks_of("big", 3), message(b"after"))
        assert await sent_to(consumer, len(stored)) == stored
        big = stored[1:4]
        redeliver(consumer, big[-1])  # the official clients name a chunked message by its last chunk
        await sent_to(consumer, len(stored) + len(big))
        assert consumer.cnx.received[len(stored) :] == [(p, 1) for p in big]
        assert sorted(consumer.pending_acks) == stored

    on_topic(scenario)


def test_shared_a_message_given_back_goes_whole_to_one_consumer(on_topic):
    async def scenario(h, topic) -> None:
        first = join(topic, "first", 1, permits=100)
        stored = await publish(h, *chunks_of("big", 5))
        assert await sent_to(first, len(stored)) == stored
        second = join(topic, "second", 2, permits=100)
        redeliver(first, stored[-1])
        await eventually_async(
            lambda: len(first.cnx.received) + len(second.cnx.received) >= 2 * len(stored),
            what="the message sent again",
        )
        again = first.cnx.positions()[len(stored) :] + second.cnx.positions()
        assert sorted(again) == stored
        assert again in (first.cnx.positions()[len(stored) :], second.cnx.positions()), "not split"

    on_topic(scenario)


def test_key_shared_a_join_mid_message_leaves_the_message_on_its_consumer(on_topic):
    async def scenario(h, topic) -> None:
        first = join(topic, "first", 1, permits=100, sub_type=KEY_SHARED)
        head = await publish(h, *chunks_of("big", 4, key=MOVES)[:2])
        assert await sent_to(first, 2) == head
        second = join(topic, "second", 2, permits=100, sub_type=KEY_SHARED)  # takes MOVES' hash
        # The key's next message is stored before the message's last chunks: it waits for the
        # message, which must not wait for it.
        same_key = await publish(h, message(b"same key", key=MOVES))
        tail = await publish(h, *chunks_of("big", 4, key=MOVES)[2:])
        other_key = await publish(h, message(b"other key", key=STAYS))
        # The other key's message, stored last, was sent: the key's next message was passed over.
        assert await sent_to(first, 5) == head + tail + other_key, "the message stays whole on its consumer"
        assert second.cnx.positions() == [], "the key's next message waits until the message is acked"
        ack(first, *head, *tail)
        assert await sent_to(second, 1) == same_key

    on_topic(scenario)


def test_key_shared_a_leave_mid_message_gives_it_whole_to_the_keys_next_consumer(on_topic):
    async def scenario(h, topic) -> None:
        staying = join(topic, "staying", 1, permits=100, sub_type=KEY_SHARED)
        leaving = join(topic, "leaving", 2, permits=2, sub_type=KEY_SHARED)  # holds MOVES' hash
        stored = await publish(h, *chunks_of("big", 4, key=MOVES))
        other = await publish(h, message(b"other", key=STAYS))
        assert await sent_to(staying, 1) == other
        assert await sent_to(leaving, 2) == stored[:2]
        leaving.subscription.remove_consumer(leaving)
        assert await sent_to(staying, 5) == other + stored

    on_topic(scenario)


def test_key_shared_many_waiting_chunks_do_not_stop_other_keys(on_topic):
    async def scenario(h, topic) -> None:
        owner = join(topic, "owner", 1, permits=1, sub_type=KEY_SHARED)
        other = join(topic, "other", 2, permits=1000, sub_type=KEY_SHARED)  # takes MOVES' hash
        big = await publish(h, *chunks_of("big", 150, key=STAYS))
        theirs = await publish(h, *[message(b"m%d" % i, key=MOVES) for i in range(11)])
        assert await sent_to(other, len(theirs)) == theirs
        assert owner.cnx.positions() == big[:1]
        owner.subscription.flow(owner, 1000)
        assert await sent_to(owner, len(big)) == big

    on_topic(scenario, dispatcher_max_read_batch=100)
