"""Idle cursor ledgers close their files (cursor_files.py): few descriptors, nothing lost."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.storage.cursor_files import OPEN_CURSOR_LEDGERS, set_open_limit

from .conftest import TOPIC, add_durable, payloads

CURSORS = 12


@pytest.fixture
def few_open():
    previous = set_open_limit(3)
    yield 3
    set_open_limit(previous)


def cursor_files_open(data_dir: Path) -> int:
    """Descriptors this process holds on files under a ``cursors`` directory of ``data_dir``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(data_dir)) and "/cursors/" in target:
            count += 1
    return count


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
        assert cursor_files_open(tmp_path) <= 2 * few_open  # two files per open cursor ledger
    assert OPEN_CURSOR_LEDGERS.parks > 0
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
