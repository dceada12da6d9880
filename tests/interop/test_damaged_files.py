"""Damaged ledger files cost only the damaged record: a real broker, the official client, real files
with flipped bytes between a stop and a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pulsar
import pytest

from magnetar.client import Client, MessageId
from magnetar.storage.names import encode_name

from ..waiting import eventually
from .support import admin_call, assert_next_is_marker, receive_n
from .test_flow_control import scrape

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: restarts on damaged files, 2,000 messages each

N = 2000
BAD = 1000


def _segment(broker, topic: str) -> tuple[Path, Path]:
    (log_path,) = (broker.data_dir / "ledgers" / encode_name(topic)).glob("*.log")
    return log_path, log_path.with_suffix(".idx")


def _offset(idx_path: Path, entry_id: int) -> int:
    return int.from_bytes(idx_path.read_bytes()[8 * entry_id : 8 * entry_id + 8], "little")


def _produce_and_stop(broker, client_factory, topic: str) -> list[bytes]:
    """N receipted messages on ``topic`` with a subscription from the earliest, then a clean stop."""
    client = client_factory(broker.service_url)
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    payloads = [b"message-%04d" % i for i in range(N)]
    results = []
    for payload in payloads:
        producer.send_async(payload, lambda result, _id: results.append(result))
    producer.flush()
    assert results == [pulsar.Result.Ok] * N
    client.close()
    assert broker.stop() == 0, broker.log_tail()
    return payloads


def _flip_record(broker, topic: str, entry_id: int) -> tuple[int, bytes]:
    """Flip four bytes inside the data of record ``entry_id``; where, and the bytes now there."""
    log_path, idx_path = _segment(broker, topic)
    flip_at = _offset(idx_path, entry_id) + 8 + 20
    with open(log_path, "r+b") as f:
        f.seek(flip_at)
        flipped = bytes(b ^ 0xFF for b in f.read(4))
        f.seek(flip_at)
        f.write(flipped)
    return flip_at, flipped


def _labels(topic: str) -> tuple[tuple[str, str], ...]:
    return (("cluster", "standalone"), ("namespace", "public/default"), ("topic", topic))


@pytest.mark.parametrize("index", ["complete", "lagging"])
def test_a_flipped_record_costs_only_itself(broker, client_factory, topic, index):
    payloads = _produce_and_stop(broker, client_factory, topic)

    log_path, idx_path = _segment(broker, topic)
    size = log_path.stat().st_size
    record = _offset(idx_path, BAD)
    flip_at, flipped = _flip_record(broker, topic, BAD)
    if index == "lagging":  # what a crash leaves: the index ends before the damaged record
        os.truncate(idx_path, 256 * 8)
    broker.restart(same_port=False)

    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    got = [m.data() for m in receive_n(consumer, N - 1, ack=True)]
    assert sorted(got) == [p for i, p in enumerate(payloads) if i != BAD]

    base = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    status, internal = admin_call(broker, "GET", base + "/internalStats")
    assert status == 200 and internal["damagedEntries"] == 1
    (place,) = internal["damage"]["places"]
    assert (place["entryId"], place["offset"]) == (BAD, record)
    assert internal["numberOfEntries"] == N  # its position is kept; the 999 after it keep theirs

    def backlog_settled():
        status, stats = admin_call(broker, "GET", base + "/stats")
        return status == 200 and stats["subscriptions"]["sub"]["msgBacklog"] == 0

    eventually(backlog_settled, what="a backlog of 0 on the subscription: the damaged entry counts as gone")
    samples = scrape(broker)
    assert samples[("magnetar_storage_damaged_entries_total", _labels(topic))] == 1
    assert "damaged" in broker.log_path.read_text() and f":{BAD} " in broker.log_path.read_text()

    # nothing was deleted: the log still holds every byte, the damaged ones included
    assert log_path.stat().st_size >= size
    with open(log_path, "rb") as f:
        f.seek(flip_at)
        assert f.read(4) == flipped
    assert_next_is_marker(consumer, client.create_producer(topic))  # the damaged entry never comes


def test_a_torn_tail_is_logged_and_kept(broker, client_factory, topic):
    payloads = _produce_and_stop(broker, client_factory, topic)
    log_path, _ = _segment(broker, topic)
    original = log_path.read_bytes()
    os.truncate(log_path, len(original) - 5)  # the last record loses its end
    broker.restart(same_port=False)

    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    got = [m.data() for m in receive_n(consumer, N - 1, ack=True)]
    assert got == payloads[:-1]
    samples = scrape(broker)
    assert samples[("magnetar_storage_dropped_tails_total", _labels(topic))] == 1
    (kept,) = log_path.parent.glob("*.damaged-*")
    offset = int(kept.name.rsplit("-", 1)[1])
    assert kept.read_bytes() == original[offset : len(original) - 5]  # the torn record, as it was
    assert log_path.stat().st_size == offset
    assert_next_is_marker(consumer, client.create_producer(topic))  # nothing of the torn record
    assert f"kept in {kept}" in broker.log_path.read_text()


def test_searches_whose_midpoint_is_damaged_pass_over_it(broker, client_factory, topic):
    """Issue 34: the first probe of a binary search over 2,000 entries is entry 1,000, the damaged
    one. Before the fix an index look-up and a seek by time there answered EntryNotFoundError
    (HTTP 500 and a failed seek); now they pass over it as reads do, and a look-up of the damaged
    message itself answers 404 saying so."""
    payloads = _produce_and_stop(broker, client_factory, topic)
    _flip_record(broker, topic, BAD)
    broker.restart(same_port=False)

    base = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    for index in (1500, 999, 1001, 0, N - 1):
        status, found = admin_call(broker, "GET", f"{base}/messageid/{index}")
        assert status == 200 and (found["ledgerId"], found["entryId"]) == (0, index), (index, found)
        status, back = admin_call(broker, "GET", f"{base}/index?ledgerId=0&entryId={index}")
        assert status == 200 and back["index"] == index, (index, back)
    status, answer = admin_call(broker, "GET", f"{base}/index?ledgerId=0&entryId={BAD}")
    assert status == 404 and "damaged" in answer["reason"], answer

    ours = Client(broker.service_url)  # our client: it shows each message's broker time
    try:
        reader = ours.create_reader(topic, MessageId.earliest)
        stored = []
        while reader.has_message_available():
            message = reader.read_next(5000)
            stored.append((message.broker_publish_time(), message.data()))
    finally:
        ours.close()
    assert [data for _, data in stored] == payloads[:BAD] + payloads[BAD + 1 :]
    target = dict((data, time) for time, data in stored)[payloads[1500]]
    expected = next(data for time, data in stored if time >= target)  # seek by time: broker time

    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "by-time", initial_position=pulsar.InitialPosition.Earliest)
    consumer.seek(target)  # the search's first probe is the damaged entry
    assert consumer.receive(5000).data() == expected


def test_damage_found_is_kept_across_restarts_and_said_once(broker, client_factory, topic):
    """Issue 34: the damage counts started again at each load, and a damaged entry read again
    after a restart (a new subscription from the earliest) was reported again. Now the counts
    and the entries already reported are kept with the topic."""
    payloads = _produce_and_stop(broker, client_factory, topic)
    _flip_record(broker, topic, BAD)
    broker.restart(same_port=False)
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    assert len(receive_n(consumer, N - 1, ack=True)) == N - 1  # the damage is found on the way
    client.close()
    base = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    assert admin_call(broker, "GET", base + "/internalStats")[1]["damagedEntries"] == 1

    assert broker.stop() == 0, broker.log_tail()
    broker.restart(same_port=False)
    status, internal = admin_call(broker, "GET", base + "/internalStats")
    assert status == 200 and internal["damagedEntries"] == 1, internal  # before anything reads it
    assert [place["entryId"] for place in internal["damage"]["places"]] == [BAD]
    assert scrape(broker)[("magnetar_storage_damaged_entries_total", _labels(topic))] == 1

    client = client_factory(broker.service_url)
    again = client.subscribe(topic, "again", initial_position=pulsar.InitialPosition.Earliest)
    got = [m.data() for m in receive_n(again, N - 1, ack=True)]
    assert got == payloads[:BAD] + payloads[BAD + 1 :]
    assert admin_call(broker, "GET", base + "/internalStats")[1]["damagedEntries"] == 1
    reported = [
        line for line in broker.log_path.read_text().splitlines() if f"entry 0:{BAD} is damaged" in line
    ]
    assert len(reported) <= 1, reported  # said when first found, not again after the restart


def test_a_closed_ledger_without_its_log_file_costs_only_itself(broker_factory, client_factory, topic):
    """Issue 34: a closed ledger whose ``.log`` file is gone failed every read of the topic. Now it
    is passed over whole, as Pulsar skips a ledger it cannot read: said once, counted, and the
    other ledgers' messages are delivered."""
    broker = broker_factory({"max_ledger_size_bytes": 16 * 1024})  # about 200 entries a ledger
    client = client_factory(broker.service_url)
    client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest).close()
    producer = client.create_producer(topic, batching_enabled=False)
    payloads = [b"message-%04d" % i for i in range(1000)]
    for payload in payloads:
        producer.send(payload)
    client.close()
    assert broker.stop() == 0, broker.log_tail()
    logs = sorted((broker.data_dir / "ledgers" / encode_name(topic)).glob("*.log"))
    assert len(logs) >= 3
    lost = logs[1]  # a closed ledger in the middle
    entries = len(lost.with_suffix(".idx").read_bytes()) // 8  # a closed ledger's index is whole
    assert entries > 0
    lost.unlink()
    broker.restart(same_port=False)

    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    got = [m.data() for m in receive_n(consumer, len(payloads) - entries, ack=True)]
    assert len(set(got)) == len(got) and set(got) < set(payloads)
    missing = sorted(set(payloads) - set(got))
    assert len(missing) == entries  # the lost ledger's messages, one run, and nothing else
    assert missing == payloads[payloads.index(missing[0]) : payloads.index(missing[0]) + entries]
    assert_next_is_marker(consumer, client.create_producer(topic))

    base = "/admin/v2/persistent/" + topic.removeprefix("persistent://")
    status, internal = admin_call(broker, "GET", base + "/internalStats")
    assert status == 200 and internal["damagedEntries"] == entries, internal
    said = [line for line in broker.log_path.read_text().splitlines() if "is missing" in line]
    assert len(said) == 1, said


def test_a_cut_newest_cursor_entry_brings_no_acknowledged_message_back(broker_factory, client_factory, topic):
    """Issue 34: when the newest cursor-ledger entry was the cut one, the acks of that flush came
    back (the messages were delivered again). Each flush now writes its marker twice."""
    broker = broker_factory({"cursor_flush_interval_seconds": 3600})  # one flush: at the stop
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    payloads = [b"message-%03d" % i for i in range(200)]
    for payload in payloads:
        producer.send(payload)
    received = receive_n(consumer, len(payloads))
    acked = {m.data() for m in received if int(m.data()[8:]) % 3 != 1}  # holes: individual acks
    for message in received:
        if message.data() in acked:
            consumer.acknowledge(message)
    client.close()  # the acks reach the broker before its connection closes
    assert broker.stop() == 0, broker.log_tail()

    (cursor_log,) = (broker.data_dir / "ledgers" / encode_name(topic) / "cursors").glob("*.log")
    os.truncate(cursor_log, cursor_log.stat().st_size - 3)  # the newest entry is cut
    broker.restart(same_port=False)
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    again = {m.data() for m in receive_n(consumer, len(payloads) - len(acked), ack=True)}
    assert again == set(payloads) - acked  # nothing acknowledged comes back
    assert_next_is_marker(consumer, client.create_producer(topic))
