"""A durable readCompacted subscription part way through a compacted view whose ledgers were deleted
since, with the official client: after a reconnect, a redelivery, a failover, a restart or kill -9
of the broker, it goes on with the rest of the view (every key's latest value that it had not
acknowledged, none skipped), then what follows the horizon, and nothing it acknowledged comes back.
A readCompacted reader that reconnects goes on likewise.

The view's ledgers are gone, so only the compacted ledger holds those messages: the subscription's
cursor keeps its acknowledgements of them (``storage/cursor.py``) and its place in the view, where
Pulsar's would start again after its mark-delete position, at the topic's first entry."""

from __future__ import annotations

import pulsar
import pytest

from tests.interop.compaction_support import compact, read_all, topic_path
from tests.interop.support import admin_call, assert_next_is_marker, receive_n
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a compaction, trimming, reconnects

#: Small ledgers, deleted as soon as nothing holds them: the view outlives its ledgers.
TRIMMED = {
    "max_ledger_size_bytes": 300,
    "retention_check_interval_seconds": 0.1,
    "cursor_flush_interval_seconds": 0.2,
}

KEYS = 12
#: The compacted view (the last value of each of 12 keys) and what follows its horizon.
VIEW = [f"v{i}".encode() for i in range(KEYS, 2 * KEYS)]
AFTER = [b"after-0", b"after-1"]
EVERYTHING = VIEW + AFTER


def _trimmed_view(broker, client, topic: str) -> list:
    """24 messages over 12 keys, compacted, 2 more after the horizon; the ledgers of the view deleted
    (a subscription held them until compaction had read them) but the last, which holds the horizon
    and what follows it. The ids of the 24."""
    holder = client.subscribe(topic, "holder", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % KEYS}") for i in range(2 * KEYS)]
    compact(broker, topic)
    for payload in AFTER:
        producer.send(payload, partition_key="k0")
    producer.close()
    holder.unsubscribe()

    def gone():
        _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
        left = {ledger["ledgerId"] for ledger in internal["ledgers"]}
        return not left & {i.ledger_id() for i in ids[:-1]} - {ids[-1].ledger_id()}

    eventually(gone, what="the ledgers of the compacted view to be trimmed")
    assert ids[KEYS].ledger_id() != ids[-1].ledger_id()  # the view begins in a ledger deleted since
    return ids


def _subscribe(client, topic: str, kind=pulsar.ConsumerType.Exclusive, name: str | None = None):
    options = {"consumer_name": name} if name else {}
    return client.subscribe(
        topic,
        "resume",
        consumer_type=kind,
        initial_position=pulsar.InitialPosition.Earliest,
        is_read_compacted=True,
        **options,
    )


def _subscription(broker, topic: str) -> dict:
    _, stats = admin_call(broker, "GET", topic_path(topic) + "/stats")
    return stats["subscriptions"]["resume"]


def _acked_at_broker(broker, topic: str, mark_delete: str, individually: int) -> None:
    """Until the broker has the acknowledgements sent (the client groups them)."""

    def check():
        stats = _subscription(broker, topic)
        got = (stats["markDeletePosition"], stats["individuallyDeletedMessages"])
        assert got == (mark_delete, individually)
        return True

    eventually(check, what=f"the acknowledgements at the broker ({mark_delete}, {individually})")


def _position(message) -> str:
    msg_id = message.message_id()
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}"


def _rest(consumer, client, topic: str, expected: list[bytes]) -> None:
    """``consumer`` gets ``expected`` (acknowledging each), then a marker: nothing else between."""
    assert [m.data() for m in receive_n(consumer, len(expected), ack=True)] == expected
    assert_next_is_marker(consumer, client.create_producer(topic), partition_key="k0")


def _before(message) -> str:
    """The position before ``message``'s: a mark-delete position that acknowledges the ones before it."""
    msg_id = message.message_id()
    return f"{msg_id.ledger_id()}:{msg_id.entry_id() - 1}"


def test_a_consumer_that_reconnects_goes_on_with_the_rest_of_the_view(broker_factory, client_factory, topic):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    consumer = _subscribe(client, topic)
    got = receive_n(consumer, 8)
    assert [m.data() for m in got] == VIEW[:8]
    for i in (0, 1, 2, 5, 6):  # holes at 3, 4 and 7
        consumer.acknowledge(got[i])
    consumer.close()  # sends the grouped acknowledgements
    _acked_at_broker(broker, topic, _position(got[2]), 2)
    consumer = _subscribe(client, topic)
    _rest(consumer, client, topic, [VIEW[3], VIEW[4], VIEW[7], *VIEW[8:], *AFTER])


def test_a_cumulative_acknowledgement_in_the_view_is_kept(broker_factory, client_factory, topic):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    consumer = _subscribe(client, topic)
    got = receive_n(consumer, 6)
    consumer.acknowledge_cumulative(got[4])
    consumer.close()
    _acked_at_broker(broker, topic, _position(got[4]), 0)
    consumer = _subscribe(client, topic)
    _rest(consumer, client, topic, EVERYTHING[5:])


def test_a_redelivery_goes_back_to_the_first_message_not_acknowledged(broker_factory, client_factory, topic):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    consumer = _subscribe(client, topic)
    got = receive_n(consumer, len(EVERYTHING))  # all of them: none is left in the client's queue
    for i in (0, 1, 3):
        consumer.acknowledge(got[i])
    _acked_at_broker(broker, topic, _position(got[1]), 1)
    consumer.redeliver_unacknowledged_messages()  # a rewind of the cursor, as Pulsar's
    _rest(consumer, client, topic, [VIEW[2], *VIEW[4:], *AFTER])


def test_a_failover_hands_the_rest_of_the_view_to_the_next_consumer(broker_factory, client_factory, topic):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    first = _subscribe(client, topic, pulsar.ConsumerType.Failover, name="a")
    second = _subscribe(client, topic, pulsar.ConsumerType.Failover, name="b")
    got = receive_n(first, 5, ack=True)  # "a" is active: the first to connect
    assert [m.data() for m in got] == VIEW[:5]
    _acked_at_broker(broker, topic, _position(got[4]), 0)
    first.close()
    _rest(second, client, topic, EVERYTHING[5:])


@pytest.mark.parametrize("stop", ["restart", "kill-9"])
def test_a_restart_of_the_broker_keeps_the_place_in_the_view(broker_factory, client_factory, topic, stop):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    consumer = _subscribe(client, topic)
    got = receive_n(consumer, 7)
    for i in (0, 1, 2, 4):
        consumer.acknowledge(got[i])
    consumer.close()
    _acked_at_broker(broker, topic, _position(got[2]), 1)
    flushes = _subscription(broker, topic)["ackState"]["flushes"]
    eventually(
        lambda: _subscription(broker, topic)["ackState"]["flushes"] > flushes,
        what="a flush of the subscription's cursor",
    )
    client.close()
    if stop == "kill-9":
        broker.kill9()
    else:
        broker.stop()
    broker.restart()
    client = client_factory(broker.service_url)
    consumer = _subscribe(client, topic)
    _rest(consumer, client, topic, [VIEW[3], *VIEW[5:], *AFTER])


def test_a_reader_that_reconnects_goes_on_with_the_rest_of_the_view(broker_factory, client_factory, topic):
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    got = [reader.read_next(timeout_millis=5000) for _ in range(5)]
    assert [m.data() for m in got] == VIEW[:5]
    broker.stop()  # the reader reconnects from the last message it got, as Pulsar's clients do
    broker.restart()
    rest = [reader.read_next(timeout_millis=30_000)]  # waits on the reconnect (has_message_available may not)
    rest += read_all(reader)
    assert [m.data() for m in rest] == EVERYTHING[5:]


def test_a_plain_consumer_of_the_subscription_starts_at_the_topics_first_entry(
    broker_factory, client_factory, topic
):
    """A consumer without readCompacted reads no view: once it is the subscription's, what was left of
    the view before the topic's first entry is behind the subscription. One refused (the Exclusive
    subscription is busy) changes nothing."""
    broker = broker_factory(TRIMMED)
    client = client_factory(broker.service_url)
    _trimmed_view(broker, client, topic)
    stored = [m.data() for m in read_all(client.create_reader(topic, pulsar.MessageId.earliest))]
    assert len(stored) < len(EVERYTHING) + KEYS  # the topic holds only its last ledgers
    consumer = _subscribe(client, topic)
    got = receive_n(consumer, 3, ack=True)
    _acked_at_broker(broker, topic, _position(got[2]), 0)
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "resume", consumer_type=pulsar.ConsumerType.Exclusive)
    assert _subscription(broker, topic)["markDeletePosition"] == _position(got[2])
    consumer.close()
    consumer = _subscribe(client, topic)  # its place in the view is where it was
    assert [m.data() for m in receive_n(consumer, 2)] == VIEW[3:5]
    consumer.close()
    plain = client.subscribe(topic, "resume", consumer_type=pulsar.ConsumerType.Exclusive)
    _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    first_ledger = internal["ledgers"][0]["ledgerId"]
    assert _subscription(broker, topic)["markDeletePosition"] == f"{first_ledger}:-1"  # no longer in the view
    _rest(plain, client, topic, stored)
