"""Broker entry metadata (PIP 70) on real storage: layout, interceptors, index continuity, recovery."""

from __future__ import annotations

import math
import time

import pytest

from magnetar.broker import entry_metadata, startup
from magnetar.broker.config import BrokerConfig
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.entry_search import CountingReader
from magnetar.protocol import wire
from magnetar.protocol.headers import parse_metadata, verify_checksum
from magnetar.storage.entry import Entry
from magnetar.storage.segment import segment_paths

from .entry_harness import TOPIC, batch, entry_metadata_prefix, message, segment_records


def assert_continuous(stored, first_index: int = 0) -> int:
    """Every entry carries an index, the first message's is ``first_index``, no gap, no repeat."""
    expected = first_index - 1
    for position, meta, producer_bytes in stored:
        metadata, _ = parse_metadata(producer_bytes)
        count = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        expected += count
        assert meta is not None and meta.HasField("index"), f"no index at {position}"
        assert meta.index == expected, f"index {meta.index} at {position}, expected {expected}"
    return expected


def mixed_entries(n: int, tag: str = "m") -> list[bytes]:
    """Plain messages and batches of 2..4, in turn."""
    out = []
    for i in range(n):
        if i % 3 == 2:
            out.append(batch([f"{tag}{i}-{j}".encode() for j in range(2 + i % 3)], seq=i * 10))
        else:
            out.append(message(f"{tag}{i}".encode(), seq=i * 10))
    return out


# -- layout ----------------------------------------------------------------------------------------


def test_stored_record_is_metadata_then_the_untouched_producer_bytes(harnesses, tmp_path):
    h = harnesses()
    before = time.time_ns() // 1_000_000
    plain, batched = message(b"hello", seq=1), batch([b"a", b"b", b"c"], seq=2)
    p1 = h.publish(plain)
    p2 = h.publish(batched)
    after = time.time_ns() // 1_000_000
    h.close()

    (ledger_dir,) = (tmp_path / "data" / "ledgers").iterdir()
    log_path, _ = segment_paths(ledger_dir, p1.ledger_id)
    records = segment_records(log_path)
    assert len(records) == 2 and p2.entry_id == 1
    for record, producer_bytes, index in ((records[0], plain, 0), (records[1], batched, 3)):
        meta = wire.BrokerEntryMetadata()
        size = int.from_bytes(record[2:6], "big")
        meta.ParseFromString(record[6 : 6 + size])
        assert meta.index == index and before <= meta.broker_timestamp <= after
        # [0x0e02][u32 size][BrokerEntryMetadata] then the producer's bytes, byte for byte
        assert record == entry_metadata_prefix(meta) + producer_bytes
        verify_checksum(record[6 + size :])  # the producer's CRC still holds: nothing recomputed


def test_no_interceptors_store_the_producer_bytes_alone(harnesses, tmp_path):
    h = harnesses(broker_entry_metadata_interceptors=[])
    data = message(b"plain")
    h.publish(data)
    [(_, meta, producer_bytes)] = h.stored()
    assert meta is None and producer_bytes == data


def test_only_the_timestamp_interceptor(harnesses):
    h = harnesses(broker_entry_metadata_interceptors=["broker_timestamp"])
    h.publish(message(b"x"))
    [(_, meta, _)] = h.stored()
    assert meta.HasField("broker_timestamp") and not meta.HasField("index")
    assert not h.topic().index_enabled


# -- interceptors ------------------------------------------------------------------------------------


class FixedTimestamp:
    """A pluggable interceptor, loaded by dotted class path in the tests below."""

    recovered: list[wire.BrokerEntryMetadata] = []

    def intercept(self, meta, num_messages):
        meta.broker_timestamp = 42_000 + num_messages

    def recover(self, last):
        FixedTimestamp.recovered.append(wire.BrokerEntryMetadata(index=last.index))


def test_interceptor_by_dotted_class_path(harnesses):
    FixedTimestamp.recovered.clear()
    h = harnesses(broker_entry_metadata_interceptors=[f"{__name__}.FixedTimestamp", "index"])
    h.publish(batch([b"1", b"2"]))
    [(_, meta, _)] = h.stored()
    assert meta.broker_timestamp == 42_002 and meta.index == 1
    assert len(FixedTimestamp.recovered) == 1  # told the topic's state when it loaded


@pytest.mark.parametrize("name", ["nope", "no.such.module.Cls", f"{__name__}.Missing", "math.pi"])
def test_unknown_interceptor_is_a_config_error(name):
    with pytest.raises(ValueError, match="interceptor"):
        startup.prepare(BrokerConfig(broker_entry_metadata_interceptors=[name]))


def test_broker_timestamp_never_goes_back(harnesses, monkeypatch):
    h = harnesses()
    clock = iter([5_000, 6_000, 4_000, 7_000])
    monkeypatch.setattr(entry_metadata.time, "time_ns", lambda: next(clock) * 1_000_000)
    for i in range(4):
        h.publish(message(b"%d" % i))
    assert [meta.broker_timestamp for _, meta, _ in h.stored()] == [5_000, 6_000, 6_000, 7_000]


def test_broker_timestamp_does_not_go_back_across_a_restart(harnesses, monkeypatch):
    h = harnesses()
    monkeypatch.setattr(entry_metadata.time, "time_ns", lambda: 9_000 * 1_000_000)
    h.publish(message(b"a"))
    h.crash()
    monkeypatch.setattr(entry_metadata.time, "time_ns", lambda: 8_000 * 1_000_000)  # clock stepped back
    h2 = harnesses()
    h2.publish(message(b"b"))
    assert [meta.broker_timestamp for _, meta, _ in h2.stored()] == [9_000, 9_000]


# -- the index ---------------------------------------------------------------------------------------


def test_index_counts_messages_of_batches(harnesses):
    h = harnesses()
    h.publish_all(mixed_entries(30))  # 20 plain messages and 10 batches of 4 (i % 3 == 2)
    assert assert_continuous(h.stored()) == 20 + 10 * 4 - 1


def test_index_follows_the_batch_not_a_lying_send_command(harnesses):
    h = harnesses()
    h.publish(batch([b"a", b"b", b"c"]), num_messages=1)  # SEND says 1, the batch holds 3
    h.publish(message(b"d"))
    assert [meta.index for _, meta, _ in h.stored()] == [2, 3]


def test_index_is_continuous_across_ledger_rollover(harnesses):
    h = harnesses(max_ledger_size_bytes=300)
    h.publish_all(mixed_entries(60))
    stored = h.stored()
    assert len({position.ledger_id for position, _, _ in stored}) > 5
    assert_continuous(stored)


def test_index_is_per_topic_partition(harnesses):
    h = harnesses()
    for name in (TOPIC + "-partition-0", TOPIC + "-partition-1"):
        h.publish_all([message(b"x"), batch([b"y", b"z"])], name=name)
    for name in (TOPIC + "-partition-0", TOPIC + "-partition-1"):
        assert [meta.index for _, meta, _ in h.stored(name)] == [0, 2]


def test_index_continues_after_a_clean_restart(harnesses):
    h = harnesses(max_ledger_size_bytes=300)
    h.publish_all(mixed_entries(20))
    h.close()
    h2 = harnesses(max_ledger_size_bytes=300)
    h2.publish_all(mixed_entries(20, tag="after"))
    assert_continuous(h2.stored())


@pytest.mark.parametrize("flushed", [False, True])
def test_index_continues_after_kill_9(harnesses, flushed):
    """Durable entries, then entries written whose callbacks never ran; with or without a snapshot."""
    h = harnesses(max_ledger_size_bytes=400)
    h.publish_all(mixed_entries(25))
    if flushed:
        h.topic().flush()
    h.publish_all(mixed_entries(10, tag="late"))  # after the snapshot
    for data in mixed_entries(5, tag="inflight"):  # written, durable callback still queued
        h.publish_nowait(data)
    h.crash()
    h2 = harnesses(max_ledger_size_bytes=400)
    h2.publish_all(mixed_entries(10, tag="after"))
    stored = h2.stored()
    assert len(stored) == 50
    assert_continuous(stored)


def test_index_continues_after_kill_9_and_a_trim(harnesses):
    """The snapshot is older than the last entries, and retention deleted their ledgers."""
    h = harnesses(max_ledger_size_bytes=300)
    h.publish_all(mixed_entries(5))
    h.topic().flush()  # snapshot here
    h.publish_all(mixed_entries(20, tag="b"))
    last_index = h.stored()[-1][1].index
    assert h.topic().trim()  # no durable subscription: every closed ledger goes
    h.crash()
    h2 = harnesses(max_ledger_size_bytes=300)
    h2.publish(message(b"next"))
    assert h2.stored()[-1][1].index == last_index + 1


def test_trim_keeps_the_index_when_only_unindexed_entries_remain(harnesses):
    """Indexed entries, kill -9 before any snapshot; then, with the index off, newer entries
    roll the ledgers over and retention deletes every ledger that held an index; kill -9.
    Only the snapshot written before the trim still knows the last index."""
    h = harnesses(max_ledger_size_bytes=300)
    h.publish_all(mixed_entries(20))
    last_index = h.stored()[-1][1].index
    h.crash()
    h = harnesses(max_ledger_size_bytes=300, broker_entry_metadata_interceptors=["broker_timestamp"])
    h.publish_all([message(b"unindexed %d" % i) for i in range(12)])
    assert h.topic().trim()
    assert all(meta is not None and not meta.HasField("index") for _, meta, _ in h.stored())
    h.crash()
    h = harnesses(max_ledger_size_bytes=300)
    h.publish(message(b"indexed again"))
    assert h.stored()[-1][1].index == last_index + 1


def test_failed_write_does_not_use_up_an_index(harnesses, monkeypatch):
    h = harnesses()
    h.publish(message(b"a"))
    ml = h.topic().ml
    real = ml.add_entry

    def refuse(data, callback=None):
        raise OSError("disk full")

    monkeypatch.setattr(ml, "add_entry", refuse)
    with pytest.raises(OSError):
        h.publish(batch([b"b", b"c"]))
    monkeypatch.setattr(ml, "add_entry", real)
    h.publish(message(b"d"))
    assert [meta.index for _, meta, _ in h.stored()] == [0, 1]


# -- turning the interceptors on and off ------------------------------------------------------------


def test_entries_stay_readable_when_interceptors_are_turned_on_and_off(harnesses):
    h = harnesses(broker_entry_metadata_interceptors=[])
    h.publish_all([message(b"off-1"), batch([b"off-2", b"off-3"])])
    h.close()
    h = harnesses()  # on: the index starts at 0 with the first message stored with one
    h.publish_all([message(b"on-1"), batch([b"on-2", b"on-3"])])
    h.close()
    h = harnesses(broker_entry_metadata_interceptors=[])
    h.publish_all([message(b"off-4")])
    h.close()
    h = harnesses()
    h.publish_all([batch([b"on-4", b"on-5"])])
    stored = h.stored()
    assert [None if meta is None else meta.index for _, meta, _ in stored] == [None, None, 0, 2, None, 4]
    # every entry, with or without metadata, is what a dispatcher and a consumer can read
    for position, _, producer_bytes in stored:
        entry = DispatchEntry.of(Entry(position, h.topic().ml.read_entry(position).data))
        assert bytes(entry.payload_for(False)) == producer_bytes
        verify_checksum(producer_bytes)


def test_index_state_survives_a_restart_with_the_index_off(harnesses):
    """on (crash before any flush), off (a flush moves the snapshot), on: no index repeats."""
    h = harnesses()
    h.publish_all(mixed_entries(6))
    last_index = h.stored()[-1][1].index
    h.crash()  # no snapshot at all
    h = harnesses(broker_entry_metadata_interceptors=["broker_timestamp"])
    h.publish_all([message(b"unindexed")])
    h.topic().flush()  # the snapshot now lies after every indexed entry
    h.crash()
    h = harnesses()
    h.publish(message(b"indexed again"))
    assert h.stored()[-1][1].index == last_index + 1


# -- seek by time --------------------------------------------------------------------------------------


def max_reads(n: int) -> int:
    return math.ceil(math.log2(n + 1)) + 1


def test_seek_by_time_follows_broker_time_not_skewed_publish_times(harnesses, monkeypatch):
    h = harnesses(max_ledger_size_bytes=600)
    hour = 3_600_000
    clock = [1_700_000_000_000]

    def now_ns():
        clock[0] += 10
        return clock[0] * 1_000_000

    monkeypatch.setattr(entry_metadata.time, "time_ns", now_ns)
    positions = []
    for i in range(100):
        skew = (hour, -hour, 0)[i % 3]  # producers an hour ahead, an hour behind, on time
        positions.append(h.publish(message(b"%d" % i, publish_time=clock[0] + skew)))
    times = [meta.broker_timestamp for _, meta, _ in h.stored()]
    assert times == sorted(times)
    topic = h.topic()
    for i in (0, 1, 37, 50, 98, 99):
        reader = CountingReader(topic.ml)
        assert topic.find_position_by_time(times[i], reader) == positions[i]
        assert reader.reads <= max_reads(100)
        # a time between two entries lands on the later one
        assert topic.find_position_by_time(times[i] - 5) == positions[i]
    assert topic.find_position_by_time(0) == positions[0]
    assert topic.find_position_by_time(times[-1] + 1) == topic.ml.next_position(positions[-1])


def test_seek_by_time_reads_are_logarithmic(harnesses):
    h = harnesses(max_ledger_size_bytes=4096)
    h.publish_all([message(b"%d" % i) for i in range(2000)])
    stored = h.stored()
    topic = h.topic()
    for i in (0, 999, 1999):
        reader = CountingReader(topic.ml)
        found = topic.find_position_by_time(stored[i][1].broker_timestamp, reader)
        assert found <= stored[i][0]
        assert reader.reads <= max_reads(2000)  # 12, where a scan reads up to 2000


def test_seek_by_time_uses_publish_time_without_broker_timestamps(harnesses):
    h = harnesses(broker_entry_metadata_interceptors=[])
    positions = [h.publish(message(b"%d" % i, publish_time=1_000 + 10 * i)) for i in range(20)]
    topic = h.topic()
    assert topic.find_position_by_time(1_000 + 10 * 7) == positions[7]
    assert topic.find_position_by_time(1_000 + 10 * 7 - 3) == positions[7]
