"""Damaged files cost only what is damaged: real segment files with flipped bytes, cut tails,
zeroed blocks, reopened by a fresh Storage. Nothing intact is lost and nothing is deleted."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from magnetar.storage import Position
from magnetar.storage.damage import PROPERTY, Damage, DamageLog
from magnetar.storage.errors import StorageError
from magnetar.storage.segment import segment_paths

from .conftest import TOPIC, add_durable, payloads

N = 2000
BAD = 1000


def _ledger_dir(tmp_path: Path) -> Path:
    (directory,) = (tmp_path / "data" / "ledgers").iterdir()
    return directory


def _offsets(idx_path: Path) -> list[int]:
    raw = idx_path.read_bytes()
    return [int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)]


def _flip(path: Path, offset: int, count: int = 4) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        old = f.read(count)
        f.seek(offset)
        f.write(bytes(b ^ 0xFF for b in old))


def _stored(open_storage, tmp_path: Path, n: int = N):
    """n durable entries in one ledger, the storage closed (clean), and that ledger's files."""
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ml.open_cursor("sub", "earliest")
    datas = payloads(n, size=100)
    positions = add_durable(ml, datas)
    storage.close()
    log_path, idx_path = segment_paths(_ledger_dir(tmp_path), positions[0].ledger_id)
    return datas, positions, log_path, idx_path


@pytest.mark.parametrize("index", ["complete", "lagging"])
def test_a_flipped_record_costs_only_itself(open_storage, tmp_path, caplog, index):
    datas, positions, log_path, idx_path = _stored(open_storage, tmp_path)
    offsets = _offsets(idx_path)
    size = log_path.stat().st_size
    _flip(log_path, offsets[BAD] + 8 + 40)  # four bytes in the middle of record 1000's data
    if index == "lagging":  # what a crash leaves: the index ends well before the damage
        os.truncate(idx_path, 512 * 8)
    caplog.set_level(logging.WARNING)
    ml = open_storage().open_managed_ledger(TOPIC)
    cursor = ml.cursors()["sub"]
    got = []
    while batch := cursor.read_entries(300):
        got.extend(batch)
    expected = [p for i, p in enumerate(positions) if i != BAD]
    assert [e.position for e in got] == expected
    assert [bytes(e.data) for e in got] == [d for i, d in enumerate(datas) if i != BAD]
    assert log_path.stat().st_size == size  # nothing cut, the damaged bytes are still there
    # every cursor takes the damaged entry as gone: once the rest is acked, nothing is left
    cursor.delete(expected)
    assert cursor.backlog() == 0 and cursor.mark_delete_position == positions[-1]
    assert ml.damage.damaged_entries == 1
    (place,) = [d for d in ml.damage.recent if d.entry_id is not None]
    assert (place.ledger_id, place.entry_id, place.offset) == (positions[BAD].ledger_id, BAD, offsets[BAD])
    warnings = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert len(warnings) == 1 and f"{positions[BAD].ledger_id}:{BAD}" in warnings[0]


def test_a_second_subscription_and_a_reader_get_past_a_damaged_entry(open_storage, tmp_path, caplog):
    _datas, positions, log_path, idx_path = _stored(open_storage, tmp_path, n=50)
    _flip(log_path, _offsets(idx_path)[10] + 8)
    caplog.set_level(logging.WARNING)
    ml = open_storage().open_managed_ledger(TOPIC)
    other = ml.open_cursor("other", "earliest")
    reader = ml.new_non_durable_cursor(Position.EARLIEST)
    first = ml.cursors()["sub"].read_entries(100)
    assert len(first) == 49
    # the first read told every cursor: their backlogs no longer count the damaged entry
    assert other.backlog() == 49 and ml.cursors()["sub"].backlog() == 49
    assert [e.position for e in reader.read_entries(100)] == [e.position for e in first]
    assert [e.position for e in other.read_entries(100)] == [e.position for e in first]
    assert sum("damaged" in r.getMessage() for r in caplog.records) == 1  # logged once
    with pytest.raises(KeyError):
        ml.read_entry(positions[10])


def test_a_damaged_last_entry_does_not_stall_the_cursor(open_storage, tmp_path):
    _datas, _positions, log_path, idx_path = _stored(open_storage, tmp_path, n=20)
    last = _offsets(idx_path)[19]
    _flip(log_path, last + 12)
    ml = open_storage().open_managed_ledger(TOPIC)
    cursor = ml.cursors()["sub"]
    assert len(cursor.read_entries(100)) == 19  # the damaged last one: a damaged tail, cut and kept
    (place,) = ml.damage.recent
    assert place.offset == last and Path(place.saved_to).exists()
    assert cursor.read_entries(100) == []
    assert not cursor.has_more_entries()
    (after,) = add_durable(ml, [b"after"])
    assert [e.position for e in cursor.read_entries(100)] == [after]


def test_a_damaged_length_field_is_passed_over_by_the_index(open_storage, tmp_path):
    _datas, positions, log_path, idx_path = _stored(open_storage, tmp_path, n=30)
    _flip(log_path, _offsets(idx_path)[5])  # the record's length: only the index knows its end
    ml = open_storage().open_managed_ledger(TOPIC)
    got = ml.read_entries(Position.EARLIEST, 100)
    assert [e.position for e in got] == positions[:5] + positions[6:]


def test_damage_in_a_closed_ledger_without_its_index(open_storage, tmp_path):
    storage = open_storage(max_ledger_size_bytes=3000)
    ml = storage.open_managed_ledger(TOPIC)
    datas = payloads(60, size=100)
    positions = add_durable(ml, datas)
    storage.close()
    first_ledger = positions[0].ledger_id
    count = sum(p.ledger_id == first_ledger for p in positions)
    log_path, idx_path = segment_paths(_ledger_dir(tmp_path), first_ledger)
    _flip(log_path, _offsets(idx_path)[3] + 20)
    idx_path.unlink()  # a closed ledger whose index is gone is rebuilt by scanning its log
    ml = open_storage(max_ledger_size_bytes=3000).open_managed_ledger(TOPIC)
    got = ml.read_entries(Position.EARLIEST, 100)
    assert [e.position for e in got] == positions[:3] + positions[4:]
    assert count > 4 and ml.damage.damaged_entries == 1


@pytest.mark.parametrize("damage", ["cut-5-bytes", "zero-last-4k"])
def test_a_torn_tail_is_logged_and_its_bytes_kept(open_storage, tmp_path, caplog, damage):
    _datas, positions, log_path, idx_path = _stored(open_storage, tmp_path, n=200)
    size = log_path.stat().st_size
    offsets = _offsets(idx_path)
    if damage == "cut-5-bytes":
        os.truncate(log_path, size - 5)
        survivors = 199
    else:
        with open(log_path, "r+b") as f:
            f.seek(size - 4096)
            f.write(bytes(4096))
        survivors = sum(1 for o in offsets if o + 108 <= size - 4096)
    tail_start = offsets[survivors]
    original = log_path.read_bytes()
    caplog.set_level(logging.WARNING)
    ml = open_storage().open_managed_ledger(TOPIC)
    assert ml.last_confirmed == positions[survivors - 1]
    assert len(ml.read_entries(Position.EARLIEST, 1000)) == survivors
    (place,) = ml.damage.recent
    assert place.entry_id is None and place.offset == tail_start
    assert place.entries == len(positions) - survivors  # the index knew of the records cut
    kept = Path(place.saved_to)
    assert kept.parent == log_path.parent and kept.read_bytes() == original[tail_start:].rstrip(b"\0")
    message = " ".join(r.getMessage() for r in caplog.records)
    assert f"offset {tail_start}" in message and str(kept) in message
    assert f"{len(original) - tail_start} bytes" in message
    # appends go on after the last intact record; the kept file is not an orphan to delete
    add_durable(ml, [b"after"])
    ml.close()
    assert kept.exists()


def test_preallocated_zeros_after_a_crash_are_not_reported(open_storage, tmp_path, caplog):
    storage = open_storage(preallocate_bytes=1 << 20)
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(10))
    caplog.set_level(logging.WARNING)
    # no close: a fresh Storage plays the restarted process, the log ends in zeros
    recovered = open_storage().open_managed_ledger(TOPIC)
    assert recovered.damage.dropped_tails == 0 and recovered.damage.damaged_entries == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def _cursor_log(tmp_path: Path) -> tuple[Path, Path]:
    (log_path,) = (_ledger_dir(tmp_path) / "cursors").glob("*.log")
    return log_path, log_path.with_suffix(".idx")


def _acked_in_steps(open_storage, steps: list[int]) -> list[Position]:
    """200 entries and one subscription that acks cumulatively up to each of ``steps``, a flush each."""
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    cursor = ml.open_cursor("sub", "earliest")
    positions = add_durable(ml, payloads(200))
    for step in steps:
        cursor.mark_delete(positions[step])
        ml.flush_cursors()
    storage.close()
    return positions


def test_a_cut_newest_marker_costs_nothing_its_twin_holds_the_flush(open_storage, tmp_path, caplog):
    """Issue 34: when the newest cursor-ledger entry was the cut one, the acks of that flush came
    back; each flush now writes its marker twice, and the copy before the cut one holds it."""
    positions = _acked_in_steps(open_storage, [49, 99, 149])
    log_path, _ = _cursor_log(tmp_path)
    os.truncate(log_path, log_path.stat().st_size - 5)  # the newest entry, a marker copy, is cut
    caplog.set_level(logging.WARNING)
    ml = open_storage().open_managed_ledger(TOPIC)
    assert ml.cursors()["sub"].mark_delete_position == positions[149]  # nothing acked comes back
    (place,) = ml.damage.recent  # the cut is still said, and its bytes kept
    assert place.entry_id is None and place.entries == 1 and Path(place.saved_to).exists()
    assert "cursor sub" in " ".join(r.getMessage() for r in caplog.records)


def test_a_truncated_cursor_ledger_goes_back_to_its_last_intact_flush_and_says_so(
    open_storage, tmp_path, caplog
):
    positions = _acked_in_steps(open_storage, [49, 99, 149])
    log_path, idx_path = _cursor_log(tmp_path)
    twins = _offsets(idx_path)[-2]  # the newest flush's first marker copy
    os.truncate(log_path, twins + 5)  # both copies of the newest flush's marker are cut
    caplog.set_level(logging.WARNING)
    ml = open_storage().open_managed_ledger(TOPIC)
    cursor = ml.cursors()["sub"]
    assert cursor.mark_delete_position == positions[99]  # the flush before: nothing older
    text = " ".join(r.getMessage() for r in caplog.records)
    assert "cursor sub" in text and "delivered again" in text and str(positions[99]) in text
    (place,) = ml.damage.recent
    assert place.entry_id is None and place.entries == 2 and Path(place.saved_to).exists()


def test_a_damaged_old_entry_in_a_cursor_ledger_does_not_cost_the_newer_flushes(open_storage, tmp_path):
    positions = _acked_in_steps(open_storage, [9, 19, 29, 39, 49])
    log_path, idx_path = _cursor_log(tmp_path)
    offsets = _offsets(idx_path)
    _flip(log_path, offsets[2] + 9)  # an old marker
    os.truncate(idx_path, 8)  # the index lags, as a kill -9 leaves it
    ml = open_storage().open_managed_ledger(TOPIC)
    assert ml.cursors()["sub"].mark_delete_position == positions[49]


def test_a_closed_ledger_that_lost_its_end_keeps_the_rest_readable(open_storage, tmp_path, caplog):
    storage = open_storage(max_ledger_size_bytes=3000)
    ml = storage.open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(60, size=100))
    storage.close()
    first_ledger = positions[0].ledger_id
    in_first = [p for p in positions if p.ledger_id == first_ledger]
    log_path, idx_path = segment_paths(_ledger_dir(tmp_path), first_ledger)
    os.truncate(log_path, _offsets(idx_path)[len(in_first) - 5] + 30)  # its last 5 entries are gone
    idx_path.unlink()
    caplog.set_level(logging.WARNING)
    ml = open_storage(max_ledger_size_bytes=3000).open_managed_ledger(TOPIC)
    got = ml.read_entries(Position.EARLIEST, 100)
    assert [e.position for e in got] == in_first[:-5] + positions[len(in_first) :]
    assert ml.damage.damaged_entries == 5
    lines = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert (
        len(lines) == 1
        and f"{first_ledger}:{len(in_first) - 5}..{first_ledger}:{len(in_first) - 1}" in lines[0]
    )


def test_the_damage_log_is_kept_and_taken_back():
    """What a managed ledger keeps as a property (issue 34): counts, the entries already reported
    (so a restart does not report one again) and the recent places."""
    writes: list[tuple[str, str]] = []
    first = DamageLog(keep=lambda key, value: writes.append((key, value)))
    first.note("t", [Damage(3, 7, 100, 20), Damage(3, None, 500, 0, entries=2)])
    first.note("t", [Damage(3, 7, 100, 20)])  # known: nothing new, nothing kept again
    assert [key for key, _ in writes] == [PROPERTY]
    again = DamageLog()
    again.restore("t", dict(writes))
    assert again.stats() == first.stats()
    assert not again.add(Damage(3, 7, 100, 20))  # reported before the restart
    fresh = DamageLog()
    fresh.restore("t", {PROPERTY: "not json"})  # unreadable: counting anew, not failing the open
    assert fresh.damaged_entries == 0


def test_damage_that_cannot_be_kept_stays_in_memory():
    def full(_key: str, _text: str) -> None:
        raise StorageError("database or disk is full")

    log = DamageLog(keep=full)
    log.note("t", [Damage(1, 2, 0, 10)])
    log.note("t", [Damage(1, 3, 10, 10)])
    assert log.damaged_entries == 2
