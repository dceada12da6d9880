"""Durable cursors in cursor ledgers (PIP 81): dirty-page flushes, recovery, migration, LRU, rolling."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from magnetar.storage import ManagedLedger, Position
from magnetar.storage.cursor_ledger import CursorLedger
from magnetar.storage.cursor_state import CursorState
from magnetar.storage.record import scan_records

from .conftest import TOPIC, add_durable, payloads
from .json_cursors import save_json_cursors

PER_LEDGER = 100
SMALL_LEDGERS = {"max_ledger_size_bytes": PER_LEDGER * 18, "fsync_policy": "never"}  # 100 entries of 10 bytes


def cursor_files(tmp_path: Path) -> list[Path]:
    """The cursor ledgers' segment files (each has an ``<id>.name`` beside them too)."""
    return sorted(p for p in tmp_path.glob("data/ledgers/*/cursors/*") if p.suffix in (".log", ".idx"))


def cursor_log(tmp_path: Path) -> Path:
    (log,) = [p for p in cursor_files(tmp_path) if p.suffix == ".log"]
    return log


def record_offsets(log: Path) -> list[int]:
    """Where each record of a segment log starts, from the log itself (an open ledger's index lags)."""
    fd = os.open(log, os.O_RDONLY)
    try:
        return [offset for offset, _ in scan_records(fd, 0, os.fstat(fd).st_size)]
    finally:
        os.close(fd)


def acked_set(cursor, positions: list[Position]) -> set[Position]:
    return {p for p in positions if cursor.is_acked(p)}


@pytest.fixture
def filled(open_storage) -> tuple[ManagedLedger, list[Position]]:
    """Five ledgers of 100 entries each."""
    ml = open_storage(**SMALL_LEDGERS).open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(5 * PER_LEDGER))
    assert len({p.ledger_id for p in positions}) == 5
    return ml, positions


def reopen(open_storage, **overrides) -> ManagedLedger:
    """A new Storage on the same directory, as after kill -9 (the old one is not closed)."""
    return open_storage(**{**SMALL_LEDGERS, **overrides}).open_managed_ledger(TOPIC)


def test_a_flush_writes_only_the_pages_that_changed(filled, open_storage):
    ml, p = filled
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete(p[1::2])  # every other entry of every ledger: 250 holes over 5 ledgers
    cursor.flush()
    full = cursor.stats()
    assert full["last_flush_pages"] == 5 and full["holes"] == 250 and full["pages"] == 5
    cursor.delete([p[2 * PER_LEDGER + 10]])  # one ledger changes
    cursor.flush()
    one = cursor.stats()
    assert one["last_flush_pages"] == 1 and one["last_flush_bytes"] < full["last_flush_bytes"]
    assert one["flushes"] == full["flushes"] + 1
    cursor.flush()  # nothing changed: no write at all
    assert cursor.stats()["flushes"] == one["flushes"]
    cursor.mark_delete(p[0])  # the mark-delete position moves over p[0] and p[1]: one page changes
    cursor.flush()
    assert cursor.stats()["last_flush_pages"] == 1

    again = reopen(open_storage).cursors()["c"]
    assert again.individually_deleted_ranges() == cursor.individually_deleted_ranges()
    assert again.mark_delete_position == cursor.mark_delete_position == p[1]
    assert acked_set(again, p) == acked_set(cursor, p)
    assert again.backlog() == cursor.backlog()


def test_recovery_skips_a_torn_marker(filled, open_storage, tmp_path):
    ml, p = filled
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete(p[1:50:2])
    cursor.flush()
    state_a = acked_set(cursor, p)
    cursor.delete(p[300:350:2])
    cursor.flush()
    state_b = acked_set(cursor, p)
    log = cursor_log(tmp_path)
    *_, first_copy, _second_copy = record_offsets(log)
    os.truncate(log, log.stat().st_size - 3)  # the write of the last marker's second copy was torn
    assert acked_set(reopen(open_storage).cursors()["c"], p) == state_b  # its first copy holds it
    os.truncate(log, first_copy + 3)  # the first copy torn too: the flush before

    again = reopen(open_storage).cursors()["c"]
    assert acked_set(again, p) == state_a
    again.delete([p[400]])  # and the cursor ledger goes on from there
    again.flush()
    assert acked_set(reopen(open_storage).cursors()["c"], p) == state_a | {p[400]}


def test_a_crash_between_the_page_writes_and_the_marker_keeps_the_previous_flush(
    filled, open_storage, monkeypatch
):
    ml, p = filled
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete(p[1:50:2])
    cursor.flush()
    state_a = acked_set(cursor, p)
    cursor.delete(p[100:300:2])

    def crash(self):
        raise SystemExit("crash before the marker")

    monkeypatch.setattr("magnetar.storage.cursor_store.Marker.encode", crash)
    with pytest.raises(SystemExit):
        cursor.flush()
    monkeypatch.undo()
    assert acked_set(reopen(open_storage).cursors()["c"], p) == state_a


def test_a_marker_whose_new_page_did_not_reach_the_disk_is_skipped(filled, open_storage, tmp_path):
    ml, p = filled
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete(p[1:50:2])
    cursor.flush()
    state_a = acked_set(cursor, p)
    cursor.delete(p[201:250:2])
    cursor.flush()  # one page, then the marker
    log = cursor_log(tmp_path)
    start, end = record_offsets(log)[-3:-1]  # the page, before the marker's two copies
    with open(log, "r+b") as f:  # the page was lost although the marker after it was not
        f.seek(start)
        f.write(bytes(end - start))
    assert acked_set(reopen(open_storage).cursors()["c"], p) == state_a


def legacy_state(p: list[Position]) -> CursorState:
    lid = p[PER_LEDGER].ledger_id
    return CursorState(
        p[1],
        [(p[0].ledger_id, 3, 5), (lid, 7, 8), (lid, 20, 30)],
        [(p[3 * PER_LEDGER + 4], [-(1 << 63) | 1, -1])],
    )


def check_legacy(cursor, p: list[Position]) -> None:
    lid = p[PER_LEDGER].ledger_id
    assert cursor.mark_delete_position == p[1]
    assert cursor.individually_deleted_ranges() == [(p[0].ledger_id, 3, 5), (lid, 7, 8), (lid, 20, 30)]
    assert cursor.batch_ack_set(p[3 * PER_LEDGER + 4]) == [-(1 << 63) | 1, -1]


def test_a_cursor_in_the_json_form_is_read_and_migrated(filled, open_storage, tmp_path):
    ml, p = filled
    ml_id = ml._id
    save_json_cursors(ml._metadata, ml_id, [("old", legacy_state(p))])
    assert cursor_files(tmp_path) == []

    migrated = reopen(open_storage)
    check_legacy(migrated.cursors()["old"], p)
    row = migrated._metadata.cursors(ml_id)["old"]
    assert row.cursor_ledger is not None and row.state.individually_deleted == []
    assert len(cursor_files(tmp_path)) == 2  # .log and .idx
    check_legacy(reopen(open_storage).cursors()["old"], p)


def test_a_schema_1_database_is_upgraded_and_its_cursors_migrated(open_storage, tmp_path):
    storage = open_storage(**SMALL_LEDGERS)
    ml = storage.open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(5 * PER_LEDGER))
    state = legacy_state(p)
    ml_id = ml._id
    storage.close()
    db = sqlite3.connect(tmp_path / "data" / "metadata.sqlite", isolation_level=None)
    db.execute("ALTER TABLE cursors DROP COLUMN cursor_ledger")
    db.execute("PRAGMA user_version=1")
    db.execute(
        "INSERT INTO cursors VALUES (?, 'old', ?, ?, ?, ?)",
        (
            ml_id,
            state.mark_delete.ledger_id,
            state.mark_delete.entry_id,
            state.ranges_json(),
            state.batch_json(),
        ),
    )
    db.close()
    check_legacy(reopen(open_storage).cursors()["old"], p)
    check_legacy(reopen(open_storage).cursors()["old"], p)


def test_pages_swap_under_a_small_memory_bound_and_answers_stay_right(open_storage):
    bound = {"max_individual_ack_cache_bytes_per_cursor": 1500}
    ml = open_storage(**SMALL_LEDGERS, **bound).open_managed_ledger(TOPIC)
    p = add_durable(ml, payloads(5 * PER_LEDGER))
    cursor = ml.open_cursor("c", "earliest")
    rng = random.Random(9)
    acked = set(rng.sample(p[1:], 300))
    for position in rng.sample(sorted(acked), len(acked)):  # acks jump between ledgers
        cursor.delete([position])
    stats = cursor.stats()
    assert stats["pages"] == 5 and stats["pages_in_memory"] < 5 and stats["swap_outs"] > 0
    assert stats["memory_bytes"] <= 1500 or stats["pages_in_memory"] == 1
    assert acked_set(cursor, p) == acked
    assert cursor.backlog() == len(p) - len(acked)
    unacked = [e.position for e in cursor.read_entries(10_000)]
    assert unacked == [x for x in p if x not in acked]
    cursor.flush()

    again = reopen(open_storage, **bound).cursors()["c"]
    assert again.stats()["pages_in_memory"] == 0
    assert again.backlog() == len(p) - len(acked)  # known without reading a page
    assert [e.position for e in again.read_entries(10_000)] == unacked
    assert acked_set(again, p) == acked
    assert again.stats()["pages_in_memory"] < 5 and again.stats()["swap_ins"] >= 5


def test_pages_behind_the_mark_delete_position_are_dropped(filled, open_storage):
    ml, p = filled
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete([x for i, x in enumerate(p) if i % PER_LEDGER and i % 3 == 0])  # holes in all 5 ledgers
    assert cursor.stats()["pages"] == 5
    cursor.flush()
    cursor.mark_delete(p[0])  # the mark-delete moves but no page changes: the flush writes only a marker
    cursor.flush()
    assert cursor.stats()["last_flush_pages"] == 0
    cursor.mark_delete(p[3 * PER_LEDGER - 1])  # past ledgers 1 to 3
    assert cursor.stats()["pages"] == 2
    cursor.flush()
    again = reopen(open_storage).cursors()["c"]
    assert again.stats()["pages"] == 2
    assert again.individually_deleted_ranges() == cursor.individually_deleted_ranges()


def test_the_cursor_ledger_is_rolled_and_the_old_one_deleted(filled, open_storage, tmp_path):
    ml, p = filled
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete(p[1:400:2])
    cursor.flush()
    first_ledger = cursor.stats()["cursor_ledger_id"]
    ml2 = reopen(open_storage, cursor_ledger_min_roll_bytes=0)
    cursor = ml2.cursors()["c"]
    for i in range(2, 80, 2):
        cursor.delete([p[i]])
        cursor.flush()
    stats = cursor.stats()
    assert stats["cursor_ledger_rolls"] >= 1 and stats["cursor_ledger_id"] != first_ledger
    assert len(cursor_files(tmp_path)) == 2  # only the current cursor ledger's .log and .idx
    assert stats["cursor_ledger_bytes"] <= 2 * stats["cursor_ledger_live_bytes"]
    again = reopen(open_storage).cursors()["c"]
    assert again.stats()["cursor_ledger_id"] == stats["cursor_ledger_id"]
    assert acked_set(again, p) == acked_set(cursor, p)


def test_orphan_cursor_ledgers_are_deleted_and_deleting_a_cursor_deletes_its_files(
    filled, open_storage, tmp_path
):
    ml, _ = filled
    ml.open_cursor("c")
    (directory,) = {f.parent for f in cursor_files(tmp_path)}
    spare = ml._metadata.allocate_ledger_id()  # handed out by this store, never committed to a cursor
    for suffix in (".log", ".idx", ".name"):  # left by a crash in the middle of a roll
        (directory / f"{spare:020d}{suffix}").write_bytes(b"")
    ml = reopen(open_storage)
    assert len(cursor_files(tmp_path)) == 2 and not (directory / f"{spare:020d}.name").exists()
    ml.delete_cursor("c")
    assert cursor_files(tmp_path) == [] and list(directory.iterdir()) == []


def test_a_cursor_ledger_from_beyond_the_metadata_is_moved_aside_not_deleted(filled, open_storage, tmp_path):
    ml, _ = filled
    ml.open_cursor("c")
    (directory,) = {f.parent for f in cursor_files(tmp_path)}
    (directory / f"{99_999:020d}.log").write_bytes(b"an id this metadata store never handed out")
    reopen(open_storage)
    assert len(cursor_files(tmp_path)) == 2
    (moved,) = (tmp_path / "data" / "orphaned").iterdir()
    assert moved.read_bytes() == b"an id this metadata store never handed out"


def test_no_ack_is_dropped_however_many_holes(open_storage):
    ml = open_storage(fsync_policy="never").open_managed_ledger(TOPIC)
    p = add_durable(ml, [b"x"] * 50_001)
    cursor = ml.open_cursor("c", "earliest")
    cursor.delete(p[1::2])  # 25,000 ranges: Pulsar would keep 10,000 of them
    ml.close()
    again = open_storage(fsync_policy="never").open_managed_ledger(TOPIC).cursors()["c"]
    assert again.stats()["holes"] == 25_000 and again.individually_deleted_count() == 25_000
    assert [e.position for e in again.read_entries(100_000)] == p[0::2]


_ACKER = textwrap.dedent(
    """
    import random
    import sys
    from magnetar.storage import Storage, StorageConfig

    config = StorageConfig(sys.argv[1], max_ledger_size_bytes=2000, fsync_policy="never")
    ml = Storage(config).open_managed_ledger("persistent://public/default/acks")
    cursor = ml.open_cursor("sub", "earliest")
    positions = [ml.add_entry(b"m%d" % i) for i in range(1000)]
    print("ready", flush=True)
    rng = random.Random(1)
    order = rng.sample(range(1, 1000), 999)
    for n, i in enumerate(order):
        cursor.delete([positions[i]])
        print(f"ack {i}", flush=True)
        if n % 50 == 49:
            cursor.flush()
            print("flushed", flush=True)
            sys.stdin.readline()  # the test says when to go on, so it can kill us between flushes
    print("done", flush=True)
    sys.stdin.read()
    """
)


def test_after_kill_minus_nine_only_acks_since_the_last_flush_are_lost(open_storage, tmp_path):
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", _ACKER, str(data_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    acked: list[int] = []
    flushed = 0
    kill_after = None
    for line in proc.stdout:
        if line.startswith("ack"):
            acked.append(int(line.split()[1]))
            if kill_after is not None and len(acked) >= kill_after:
                break
        elif line.startswith("flushed"):
            flushed = len(acked)
            if flushed >= 600:
                kill_after = flushed + 25  # in the middle of the next batch of 50
            proc.stdin.write("go\n")
            proc.stdin.flush()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    # Lines written before the kill may still be in the pipe: they count too (a line the kill cut
    # short belongs to an ack that no flush followed, so leaving it out changes nothing).
    for line in proc.stdout:
        if not line.endswith("\n"):
            break
        if line.startswith("ack"):
            acked.append(int(line.split()[1]))
        elif line.startswith("flushed"):
            flushed = len(acked)
    proc.stdin.close()
    proc.stdout.close()
    assert flushed in (600, 650)  # the child waits for us after each flush, so it got no further
    ml = open_storage(max_ledger_size_bytes=2000).open_managed_ledger("persistent://public/default/acks")
    cursor = ml.cursors()["sub"]
    positions = [e.position for e in ml.read_entries(Position.EARLIEST, 2000)]
    recovered = {i for i, position in enumerate(positions) if cursor.is_acked(position)}
    assert set(acked[:flushed]) <= recovered  # every flushed ack survived
    assert recovered <= set(acked)  # and nothing that was not acked counts as acked


def test_cursor_ledgers_created_at_once_in_a_new_directory_all_succeed(tmp_path):
    # The broker creates the cursors of one topic on its open threads, so two may find the
    # cursors directory missing and both make it (a subscriber was refused with EEXIST).
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often, so the look and the mkdir interleave
    try:
        for attempt in range(30):
            directory = tmp_path / f"t{attempt}" / "cursors"
            directory.parent.mkdir()
            barrier = threading.Barrier(12)
            errors: list[BaseException] = []
            made: list[CursorLedger] = []

            def create(
                ledger_id: int, directory=directory, barrier=barrier, errors=errors, made=made
            ) -> None:
                barrier.wait()
                try:
                    made.append(CursorLedger.create(directory, ledger_id, f"c{ledger_id}"))
                except BaseException as exc:
                    errors.append(exc)

            threads = [threading.Thread(target=create, args=(100 + i,)) for i in range(12)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert errors == [] and len(made) == 12
            for ledger in made:
                ledger.close()
    finally:
        sys.setswitchinterval(previous)
