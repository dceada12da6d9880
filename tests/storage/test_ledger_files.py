"""Idle ledgers close their files (ledger_files.py): few descriptors, nothing lost.

Cursor ledgers and managed ledgers (the open ledger and the closed ones being read) share one
process-wide bound on open files; a parked one opens its files again when written or read.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from magnetar.storage.ledger_files import OPEN_LEDGER_FILES, set_open_limit

from .conftest import TOPIC, add_durable, payloads

CURSORS = 12


@pytest.fixture
def few_open():
    """At most 8 ledger files open: the managed ledger's two and three cursor ledgers'."""
    previous = set_open_limit(8)
    yield 8
    set_open_limit(previous)


def files_open(data_dir: Path, under: str = "/") -> int:
    """Descriptors this process holds on segment files (``.log``, ``.idx``) of ``data_dir``
    whose path holds ``under``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(data_dir)) and under in target and target.endswith((".log", ".idx")):
            count += 1
    return count


def cursor_files_open(data_dir: Path) -> int:
    return files_open(data_dir, "/cursors/")


def test_many_cursors_keep_few_files_open_and_lose_nothing_across_restarts(open_storage, tmp_path, few_open):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    stored = add_durable(ml, payloads(40))
    cursors = [ml.open_cursor(f"sub-{i}", "earliest") for i in range(CURSORS)]
    for round_no in range(3):  # each round every cursor acks more and is flushed (its files reopened)
        for i, cursor in enumerate(cursors):
            cursor.mark_delete(stored[i + 5 * round_no])
            cursor.delete([stored[i + 5 * round_no + 2]])  # an individual ack past it: a page too
        ml.flush_cursors()
        assert files_open(tmp_path) <= few_open
    assert OPEN_LEDGER_FILES.parks > 0
    # A clean restart, then kill -9 style (no close): every cursor as last flushed.
    ml.close()
    again = open_storage().open_managed_ledger(TOPIC)
    for i in range(CURSORS):
        cursor = again.open_cursor(f"sub-{i}")
        assert cursor.mark_delete_position == stored[i + 10]
        assert cursor.is_acked(stored[i + 12]) and not cursor.is_acked(stored[i + 11])
        cursor.mark_delete(stored[i + 20])
    again.flush_cursors()
    after_crash = open_storage().open_managed_ledger(TOPIC)
    assert [after_crash.open_cursor(f"sub-{i}").mark_delete_position for i in range(CURSORS)] == [
        stored[i + 20] for i in range(CURSORS)
    ]


def test_a_parked_cursor_ledger_reads_and_rolls_over(open_storage, few_open):
    # Rolling a cursor ledger over reads its live pages back: from a parked one, it reopens it.
    storage = open_storage(cursor_ledger_min_roll_bytes=1)
    ml = storage.open_managed_ledger(TOPIC)
    stored = add_durable(ml, payloads(60))
    cursors = [ml.open_cursor(f"sub-{i}", "earliest") for i in range(CURSORS)]
    for step in range(4):
        for cursor in cursors:
            cursor.delete([stored[10 + 3 * step + k] for k in range(3)])
        ml.flush_cursors()
    ml.close()
    again = open_storage().open_managed_ledger(TOPIC)
    for i in range(CURSORS):
        cursor = again.open_cursor(f"sub-{i}")
        assert cursor.mark_delete_position < stored[10]
        assert all(cursor.is_acked(stored[p]) for p in range(10, 22)) and not cursor.is_acked(stored[9])


# -- managed ledgers ------------------------------------------------------------------------------

TOPICS = 12


def test_many_managed_ledgers_keep_few_files_open_and_read_back_everything(open_storage, tmp_path, few_open):
    # No entry cache: every read goes to the files, of a parked ledger too.
    storage = open_storage(entry_cache_bytes=0)
    ledgers = [storage.open_managed_ledger(f"{TOPIC}-{i}") for i in range(TOPICS)]
    stored = {}
    for round_no in range(3):  # each round writes to every ledger: a parked one reopens for the write
        for i, ml in enumerate(ledgers):
            stored.setdefault(i, []).extend(add_durable(ml, payloads(5, tag=f"t{i}r{round_no}-")))
            assert files_open(tmp_path) <= few_open
    assert OPEN_LEDGER_FILES.parks > 0
    for i, ml in enumerate(ledgers):  # ... and for a read
        got = ml.read_entries(stored[i][0], 100)
        assert [bytes(e.data) for e in got] == [p for r in range(3) for p in payloads(5, tag=f"t{i}r{r}-")]
        assert files_open(tmp_path) <= few_open
    # Kill -9 style (no close): everything durable is there, in every ledger.
    again = open_storage()
    for i in range(TOPICS):
        ml = again.open_managed_ledger(f"{TOPIC}-{i}")
        assert ml.last_confirmed == stored[i][-1]
        assert len(ml.read_entries(stored[i][0], 100)) == 15


def test_a_parked_ledger_rolls_over_and_reads_its_closed_ledgers(open_storage, tmp_path, few_open):
    storage = open_storage(entry_cache_bytes=0, max_ledger_size_bytes=64)
    ledgers = [storage.open_managed_ledger(f"{TOPIC}-{i}") for i in range(TOPICS)]
    for ml in ledgers:
        add_durable(ml, payloads(20, size=40))  # a ledger every 2 entries or so
    assert all(len(ml.ledgers()) > 5 for ml in ledgers)
    for ml in ledgers:
        first = ml.first_position()
        assert first is not None
        assert [bytes(e.data) for e in ml.read_entries(first, 100)] == payloads(20, size=40)
        # The others are parked; the one read holds its open ledger and up to 8 closed ones.
        assert files_open(tmp_path) <= 2 + 8
        ml.close()
    again = open_storage().open_managed_ledger(f"{TOPIC}-0")
    assert len(again.read_entries(again.first_position(), 100)) == 20


class Deferred:
    """Plays the owner's event loop: holds group-commit rounds until the test runs them."""

    def __init__(self) -> None:
        self.waiting: list = []

    def __call__(self, callback) -> None:
        self.waiting.append(callback)

    def run(self) -> None:
        batch, self.waiting = self.waiting, []
        for callback in batch:
            callback()


def test_a_ledger_with_an_fsync_pending_keeps_its_files_until_the_round(open_storage, tmp_path, few_open):
    deferred = Deferred()
    storage = open_storage(defer=deferred)
    pending = storage.open_managed_ledger(TOPIC)
    durable = []
    pending.add_entry(b"not yet fsynced", lambda position, error: durable.append(position))
    assert deferred.waiting and not durable
    # Many more ledgers opened and written (on another thread: their rounds go to the fsync thread).
    others = []

    def open_others() -> None:
        for i in range(TOPICS):
            ml = storage.open_managed_ledger(f"{TOPIC}-{i}")
            add_durable(ml, [b"x"])
            others.append(ml)

    worker = threading.Thread(target=open_others)
    worker.start()
    worker.join()
    assert len(others) == TOPICS and OPEN_LEDGER_FILES.parks > 0
    assert not pending._current.closed  # passed over: its round has not run
    assert files_open(tmp_path, "orders/") == 2
    deferred.run()
    assert durable == [pending.last_confirmed]
    storage.open_managed_ledger(f"{TOPIC}-again")  # one more: now the oldest may go
    assert pending._current.closed and files_open(tmp_path, "orders/") == 0
    assert [bytes(e.data) for e in pending.read_entries(durable[0], 10)] == [b"not yet fsynced"]


def test_with_fsync_policy_never_a_park_fsyncs_as_a_close_does(open_storage, tmp_path, few_open):
    storage = open_storage(fsync_policy="never")
    first = storage.open_managed_ledger(TOPIC)
    first.add_entry(b"written, not fsynced")
    fsyncs = storage.fsync_count
    for i in range(TOPICS):
        storage.open_managed_ledger(f"{TOPIC}-{i}").add_entry(b"x")
    assert first._current.closed
    assert storage.fsync_count > fsyncs
    first.add_entry(b"after the park")
    assert [bytes(e.data) for e in first.read_entries(first.first_position(), 10)] == [
        b"written, not fsynced",
        b"after the park",
    ]
