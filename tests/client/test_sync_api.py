"""The blocking API's per-message calls do not wait for the loop: what they still promise.

``send_async`` queues and returns, ``receive`` takes queued messages on the caller's thread,
acknowledgements are posted. These tests hold them to order, back-pressure, errors where
the official client gives them, and acks applied before what follows them (flow control:
``test_against_broker.py::test_flow_control_refills_past_the_queue_size``).
"""

from __future__ import annotations

import threading

import pulsar
import pytest

from magnetar.client import ConsumerType, InitialPosition, Result
from magnetar.client.errors import CumulativeAcknowledgementNotAllowed, ProducerQueueIsFull
from tests.waiting import eventually


def _collect(n: int):
    """A send_async callback recording (result, id) in call order, and an event set after ``n``."""
    results: list[tuple[Result, object]] = []
    done = threading.Event()

    def callback(result, msg_id):
        results.append((result, msg_id))
        if len(results) == n:
            done.set()

    return results, done, callback


def test_send_async_and_send_keep_call_order(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic)
    results, done, callback = _collect(300)
    sent_ids = []
    for i in range(300):
        if i % 50 == 49:
            sent_ids.append(producer.send(b"%d" % i))  # waits behind the queued ones
        producer.send_async(b"%d" % i, callback)
    assert done.wait(10)
    assert all(result is Result.Ok for result, _ in results)
    async_ids = [msg_id for _, msg_id in results]
    assert async_ids == sorted(async_ids)
    got = [consumer.receive(5000) for _ in range(306)]
    expected = []
    for i in range(300):
        if i % 50 == 49:
            expected.append(b"%d" % i)
        expected.append(b"%d" % i)
    assert [m.data() for m in got] == expected
    assert {m.message_id() for m in got} >= set(sent_ids)


def _send_numbered(client, topic, n, **producer_options):
    """A consumer on ``topic``, then ``n`` send_async calls of b"0", b"1"... in a tight loop."""
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, **producer_options)
    results, done, callback = _collect(n)
    for i in range(n):
        producer.send_async(b"%d" % i, callback)
    return consumer, producer, results, done


def test_a_full_queue_fails_the_callback_without_blocking_or_losing_the_rest(magnetar_client, topic):
    consumer, producer, results, done = _send_numbered(
        magnetar_client, topic, 200, max_pending_messages=1, block_if_queue_full=False
    )
    assert done.wait(10)
    full = [msg_id for result, msg_id in results if result is Result.ProducerQueueIsFull]
    stored = [msg_id for result, msg_id in results if result is Result.Ok]
    assert full and stored, "one pending message at a time: a tight loop must hit the limit"
    assert all(msg_id is None for msg_id in full) and len(full) + len(stored) == 200
    received = [consumer.receive(5000) for _ in stored]
    assert [m.message_id() for m in received] == stored
    # Nothing else was stored: a later message is the next one received.
    producer.send(b"later")
    assert consumer.receive(5000).data() == b"later"


def test_a_blocking_producer_delivers_everything_through_a_small_queue(magnetar_client, topic):
    consumer, producer, results, done = _send_numbered(
        magnetar_client, topic, 500, max_pending_messages=3, block_if_queue_full=True
    )
    producer.flush()
    assert done.is_set() and all(result is Result.Ok for result, _ in results)
    assert [consumer.receive(5000).data() for _ in range(500)] == [b"%d" % i for i in range(500)]


def test_threads_blocked_on_a_full_queue_all_get_through_in_their_own_order(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    producer = magnetar_client.create_producer(topic, max_pending_messages=2, block_if_queue_full=True)

    def send(name: str) -> None:
        for i in range(200):
            producer.send_async(f"{name}-{i}".encode(), None)

    threads = [threading.Thread(target=send, args=(f"t{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert not any(thread.is_alive() for thread in threads), "a caller waiting for room was never woken"
    producer.flush()
    got = [consumer.receive(5000).data().decode() for _ in range(800)]
    for n in range(4):
        assert [g for g in got if g.startswith(f"t{n}-")] == [f"t{n}-{i}" for i in range(200)]


def test_every_caller_waiting_for_room_is_woken(magnetar_client, topic):
    # Two messages leave the full queue in one go: both waiting callers must be let on, not one.
    producer = magnetar_client.create_producer(topic, max_pending_messages=2, block_if_queue_full=True)
    release = threading.Event()
    magnetar_client.loop.call_soon_threadsafe(release.wait, 5)  # the loop takes nothing meanwhile
    producer.send_async(b"0", None)
    producer.send_async(b"1", None)  # the queue to the loop is full
    waiting = [threading.Thread(target=producer.send_async, args=(b"w%d" % n, None)) for n in range(2)]
    for thread in waiting:
        thread.start()
    eventually(lambda: producer._waiting == 2, what="both callers waiting for room")
    assert all(thread.is_alive() for thread in waiting), "both wait for room"
    release.set()
    for thread in waiting:
        thread.join(5)
    assert not any(thread.is_alive() for thread in waiting)
    producer.flush()


def test_send_after_close_reaches_the_callback_as_already_closed(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    producer.close()
    results, done, callback = _collect(1)
    producer.send_async(b"late", callback)
    assert done.wait(5)
    assert results == [(Result.AlreadyClosed, None)]


def test_send_raises_queue_full_to_its_caller(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic, max_pending_messages=1, block_if_queue_full=False)
    release = threading.Event()
    magnetar_client.loop.call_soon_threadsafe(release.wait, 5)  # the loop takes nothing meanwhile
    results, done, callback = _collect(2)
    producer.send_async(b"first", callback)  # the one message the queue to the loop holds
    producer.send_async(b"second", callback)
    with pytest.raises(ProducerQueueIsFull):
        producer.send(b"third")
    release.set()
    assert done.wait(5)
    assert sorted(result for result, _ in results) == [Result.Ok, Result.ProducerQueueIsFull]


def test_calls_from_a_callback_on_the_loop_thread_are_refused(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    errors: list[BaseException] = []
    done = threading.Event()

    def callback(result, msg_id):
        try:
            producer.send_async(b"nested", None)
        except RuntimeError as exc:
            errors.append(exc)
        done.set()

    producer.send_async(b"x", callback)
    assert done.wait(5)
    assert len(errors) == 1 and "loop thread" in str(errors[0])


def test_acks_posted_before_close_are_sent(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    for i in range(100):
        producer.send_async(b"%d" % i, None)
    producer.flush()
    consumer = magnetar_client.subscribe(topic, "sub", initial_position=InitialPosition.Earliest)
    for _ in range(60):
        consumer.acknowledge(consumer.receive(5000))
    consumer.close()  # right after the last posted ack
    again = magnetar_client.subscribe(topic, "sub")
    assert [again.receive(5000).data() for _ in range(40)] == [b"%d" % i for i in range(60, 100)]
    # None of the acknowledged ones comes again: a later message is the next one received.
    producer.send(b"later")
    assert again.receive(5000).data() == b"later"


def test_cumulative_ack_is_posted_and_refused_on_shared_at_once(magnetar_client, topic):
    producer = magnetar_client.create_producer(topic)
    for i in range(20):
        producer.send(b"%d" % i)
    exclusive = magnetar_client.subscribe(topic, "ex", initial_position=InitialPosition.Earliest)
    messages = [exclusive.receive(5000) for _ in range(20)]
    exclusive.acknowledge_cumulative(messages[14])
    exclusive.close()
    again = magnetar_client.subscribe(topic, "ex")
    assert [again.receive(5000).data() for _ in range(5)] == [b"%d" % i for i in range(15, 20)]
    shared = magnetar_client.subscribe(
        topic, "sh", consumer_type=ConsumerType.Shared, initial_position=InitialPosition.Earliest
    )
    with pytest.raises(CumulativeAcknowledgementNotAllowed):
        shared.acknowledge_cumulative(shared.receive(5000))


def test_acknowledging_something_else_fails_at_once(magnetar_client, topic):
    consumer = magnetar_client.subscribe(topic, "sub")
    with pytest.raises(TypeError):
        consumer.acknowledge("not a message")
    with pytest.raises(TypeError):
        consumer.negative_acknowledge(42)


def test_results_carry_the_official_clients_numbers():
    for result in Result:
        if result is not Result.ServerError:  # ours: a broker error with no more precise result
            assert int(getattr(pulsar.Result, result.name)) == result.value, result.name
