"""``receiver_queue_size=0``: a consumer that fetches nothing ahead, one message per receive."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import ConsumerType, InvalidConfiguration, Timeout, aio
from tests.client.listeners import collecting_listener
from tests.client.proxy import ShrinkingProxy
from tests.waiting import eventually_async


def _shared(client, topic, **options):
    return client.subscribe(topic, "work", consumer_type=ConsumerType.Shared, **options)


@pytest.mark.parametrize("queue", [0, 1])
def test_a_busy_zero_queue_consumer_holds_no_message_back(magnetar_client, topic, queue):
    # The point of a zero queue on a Shared subscription: while one consumer works on a message,
    # the next ones go to an idle consumer instead of waiting in the busy one's queue. With a
    # queue of one (the control) the busy consumer holds one of them.
    busy = _shared(magnetar_client, topic, receiver_queue_size=queue)
    idle = _shared(magnetar_client, topic, receiver_queue_size=0)
    producer = magnetar_client.create_producer(topic)
    producer.send(b"first")
    held = busy.receive(5000)  # busy works on it, and asks for nothing more
    for i in range(5):
        producer.send(b"%d" % i)
    # the control: a queue of one holds a message back, so the idle consumer gets four
    got = [idle.receive(5000).data() for _ in range(5 if queue == 0 else 4)]
    # the busy consumer asks for nothing more: a marker is the idle one's next, after anything else
    producer.send(b"marker")
    assert idle.receive(5000).data() == b"marker"
    if queue == 0:
        assert held.data() == b"first" and sorted(got) == [b"%d" % i for i in range(5)]
        assert busy._inner.queued_messages == 0
    else:
        assert len(set(got)) == 4 and busy._inner.queued_messages == 1


def test_a_timed_out_receive_leaves_its_request_for_the_next_message(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub", receiver_queue_size=0)
    producer = magnetar_client.create_producer(topic)
    with pytest.raises(Timeout):
        consumer.receive(200)
    producer.send(b"late")
    assert consumer.receive(5000).data() == b"late"
    producer.send(b"next")
    assert consumer.receive(5000).data() == b"next"


def test_batches_and_chunked_messages_arrive_whole_and_in_order(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub", receiver_queue_size=0)
    batching = magnetar_client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=50)
    for i in range(10):
        batching.send_async(b"b%d" % i, None)
    batching.flush()  # one batch of ten: one permit, then the consumer asks for ten
    chunking = magnetar_client.create_producer(topic, chunking_enabled=True)
    big = bytes(range(256)) * 30_000  # 7.7 MB: two chunks at the broker's 5 MiB limit
    chunking.send(big)
    batching.send(b"after")
    got = [consumer.receive(5000).data() for _ in range(12)]
    assert got[:10] == [b"b%d" % i for i in range(10)]
    assert got[10] == big and got[11] == b"after"
    with pytest.raises(Timeout):
        consumer.receive(300)


def test_a_listener_gets_every_message(magnetar_client, topic):
    seen, done, listener = collecting_listener(50)
    magnetar_client.subscribe(topic, "sub", receiver_queue_size=0, message_listener=listener)
    producer = magnetar_client.create_producer(topic)
    for i in range(50):
        producer.send_async(b"%d" % i, None)
    assert done.wait(10)
    assert seen == [b"%d" % i for i in range(50)]


def test_several_topics_cannot_share_a_zero_queue(magnetar_client, topic):
    with pytest.raises(InvalidConfiguration):
        magnetar_client.subscribe([topic, topic + "-other"], "sub", receiver_queue_size=0)


def test_a_receive_waiting_across_a_reconnect_asks_the_new_connection_for_a_message(broker, topic):
    # The request made on the old connection died with it; the new one must be asked again,
    # or a receive without a timeout waits for ever.
    async def main(proxy: ShrinkingProxy) -> None:
        async with aio.Client(
            proxy.service_url, operation_timeout_seconds=10, max_backoff_seconds=0.2
        ) as client:
            consumer = await client.subscribe(topic, "sub", receiver_queue_size=0)
            waiting = asyncio.ensure_future(consumer.receive())
            await asyncio.sleep(0)  # one turn of the loop: the receive waits, its FLOW sent
            assert not waiting.done()
            first = consumer.cnx
            proxy.cut()
            await eventually_async(
                lambda: consumer.is_connected() and consumer.cnx is not first, what="a reconnect"
            )
            async with aio.Client(broker.service_url) as other:
                producer = await other.create_producer(topic)
                await producer.send(b"after the reconnect")
            assert (await asyncio.wait_for(waiting, 10)).data() == b"after the reconnect"

    with ShrinkingProxy(broker.port) as proxy:
        asyncio.run(main(proxy))
