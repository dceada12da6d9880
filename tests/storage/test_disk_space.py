"""Telling "no room" apart from other failures, and the free-space threshold (real statvfs)."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

from magnetar.storage.disk_space import DiskSpace, is_out_of_space


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
