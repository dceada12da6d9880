"""Trimming consumed ledgers, with and without retention."""

from __future__ import annotations

from magnetar.storage import Position
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.retention import past_retention
from tests.waiting import eventually

from .conftest import TOPIC, add_durable, payloads

SMALL = {"max_ledger_size_bytes": 80}  # 3 entries of 20 bytes per ledger


def _segment_files(tmp_path) -> int:
    return len(list((tmp_path / "data" / "ledgers").rglob("*.log")))


def test_without_cursors_everything_closed_is_consumed(open_storage, tmp_path):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(10, size=20))
    ids = [info.ledger_id for info in ml.ledgers()]
    assert ml.trim() == ids[:-1]  # never the current ledger
    assert [info.ledger_id for info in ml.ledgers()] == ids[-1:]
    assert _segment_files(tmp_path) == 1
    assert [e.position for e in ml.read_entries(Position.EARLIEST, 100)] == [p[9]]
    assert ml.first_position() == p[9]
    assert ml.trim() == []


def test_the_slowest_durable_cursor_holds_ledgers(open_storage):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(12, size=20))  # ledgers: p0-2, p3-5, p6-8, p9-11
    fast = ml.open_cursor("fast", "earliest")
    slow = ml.open_cursor("slow", "earliest")
    fast.mark_delete(p[10])
    assert ml.trim() == []
    slow.mark_delete(p[4])  # in the middle of the second ledger
    assert ml.trim() == [p[0].ledger_id]
    slow.mark_delete(p[5])  # the last entry of the second ledger: it is fully consumed
    assert ml.trim() == [p[3].ledger_id]
    slow.delete([p[6], p[7], p[8]])  # individual acks that close the gap move mark-delete too
    assert ml.trim() == [p[6].ledger_id]
    assert slow.backlog() == 3 and fast.backlog() == 1
    assert [e.position for e in slow.read_entries(100)] == p[9:]


def test_deleting_a_cursor_releases_what_it_held(open_storage):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    add_durable(ml, payloads(7, size=20))
    ml.open_cursor("held", "earliest")
    assert ml.trim() == []
    ml.delete_cursor("held")
    assert len(ml.trim()) == 2


def test_non_durable_cursors_hold_nothing_and_skip_trimmed_ledgers(open_storage):
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(9, size=20))
    reader = ml.new_non_durable_cursor(Position.EARLIEST)
    assert [e.position for e in reader.read_entries(2)] == p[:2]
    ml.open_cursor("sub", "earliest").mark_delete(p[5])
    assert len(ml.trim()) == 2
    assert [e.position for e in reader.read_entries(100)] == p[6:]
    assert reader.backlog() == 3  # what is left of the ledger: the trimmed entries are not counted


def test_trim_survives_reopen(open_storage):
    storage = open_storage(**SMALL)
    ml = storage.open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(9, size=20))
    cursor = ml.open_cursor("sub", "earliest")
    cursor.mark_delete(p[5])
    trimmed = ml.trim()
    storage.close()
    ml = open_storage(**SMALL).open_managed_ledger(TOPIC)
    assert not {info.ledger_id for info in ml.ledgers()} & set(trimmed)
    assert ml.first_position() == p[6]
    cursor = ml.cursors()["sub"]
    assert [e.position for e in cursor.read_entries(100)] == p[6:]
    assert cursor.backlog() == 3


def test_retention_time_keeps_consumed_ledgers_for_a_while(open_storage):
    # Long enough that the first trim comes well within it on a loaded machine.
    ml = open_storage(retention_time_seconds=1.0, **SMALL).open_managed_ledger(TOPIC)
    add_durable(ml, payloads(7, size=20))
    ml.open_cursor("sub", "latest")
    assert ml.trim() == []
    # Trimmed once the retention time is over (each ledger counted from when it was closed).
    trimmed: list[int] = []

    def consumed_ledgers_trimmed() -> bool:
        trimmed.extend(ml.trim())
        return len(trimmed) >= 2

    eventually(consumed_ledgers_trimmed, what="the consumed ledgers trimmed after the retention time")
    assert len(trimmed) == 2


def test_retention_size_keeps_the_newest_consumed_data(open_storage):
    ml = open_storage(retention_size_bytes=200, **SMALL).open_managed_ledger(TOPIC)
    add_durable(ml, payloads(13, size=20))  # 4 closed ledgers of 84 bytes, 1 open
    ml.open_cursor("sub", "latest")
    closed = [info.ledger_id for info in ml.ledgers()[:-1]]
    assert ml.trim() == closed[:2]  # 4 * 84 > 200, 3 * 84 > 200, 2 * 84 <= 200
    assert ml.trim() == []


def test_negative_retention_keeps_everything(open_storage):
    ml = open_storage(retention_time_seconds=-1, retention_size_bytes=-1, **SMALL).open_managed_ledger(TOPIC)
    add_durable(ml, payloads(10, size=20))
    assert ml.trim() == []


def _info(ledger_id: int, size: int, closed_at: float) -> LedgerInfo:
    return LedgerInfo(ledger_id, 1, size, closed_at - 1, True, closed_at)


def test_past_retention_rules():
    now = 1000.0
    consumed = [_info(1, 100, now - 50), _info(2, 100, now - 20), _info(3, 100, now - 5)]
    assert past_retention(consumed, 0, 0, now) == consumed
    assert past_retention(consumed, 10, 0, now) == consumed[:2]
    assert past_retention(consumed, 0, 150, now) == consumed[:2]
    assert past_retention(consumed, 30, 250, now) == consumed[:1]  # past either limit goes
    assert past_retention(consumed, 100, 1000, now) == []
    assert past_retention(consumed, -1, 0, now) == []
    assert past_retention(consumed, 0, -1, now) == []
    assert past_retention(consumed, -1, 150, now) == consumed[:2]
