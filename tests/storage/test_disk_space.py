"""Telling "no room" apart from other failures, the free-space threshold and the room wanted before
writes resume (real statvfs)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from magnetar.storage.disk_space import RESUME_MARGIN_BYTES, DiskSpace, is_out_of_space
from magnetar.storage.errors import StorageFullError
from magnetar.storage.write_gate import WriteGate


def test_no_room_errors_are_told_apart():
    assert is_out_of_space(OSError(errno.ENOSPC, "No space left on device"))
    assert is_out_of_space(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not is_out_of_space(OSError(errno.EIO, "Input/output error"))
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = sqlite3.SQLITE_FULL
    assert is_out_of_space(full)
    assert not is_out_of_space(sqlite3.OperationalError("disk I/O error"))
    assert not is_out_of_space(ValueError("no"))


def test_threshold_against_the_real_free_space(tmp_path: Path):
    free = DiskSpace(tmp_path).available()
    assert free > 0
    assert not DiskSpace(tmp_path).below_threshold()  # no threshold set
    assert DiskSpace(tmp_path, min_free_bytes=free * 4).below_threshold()
    assert not DiskSpace(tmp_path, min_free_bytes=free * 4).has_room_to_resume()
    assert not DiskSpace(tmp_path, min_free_bytes=1).below_threshold()


def test_room_to_resume_counts_the_add_that_found_none(tmp_path: Path):
    """After a refused add, writes resume only with room for that add and the margin: room for the
    margin alone would admit a producer whose next add fails the same way (issue 34)."""
    free = DiskSpace(tmp_path).available()
    assert DiskSpace(tmp_path).has_room_to_resume(0)
    assert not DiskSpace(tmp_path).has_room_to_resume(free)
    assert DiskSpace(tmp_path).has_room_to_resume(free - 4 * RESUME_MARGIN_BYTES)


def test_the_write_gate_keeps_refusing_until_there_is_room_for_the_refused_add(tmp_path: Path):
    space = DiskSpace(tmp_path, interval_s=0)
    gate = WriteGate("t", space)
    free = space.available()
    gate.write_failed(OSError(errno.ENOSPC, "No space left on device"), None, needed=free)
    with pytest.raises(StorageFullError):
        gate.check(lambda: True)  # the room there is would not take the add that failed
    gate.resumed()
    gate.check(lambda: True)  # a new episode starts with no such need
    gate.write_failed(OSError(errno.ENOSPC, "No space left on device"), None, needed=1024)
    gate.check(lambda: True)  # room for it and the margin: adds may be tried again
