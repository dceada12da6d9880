"""Free space on the data directory's filesystem, and telling "disk full" errors apart.

A full disk is a state the broker reports and leaves by itself, not a crash: writes are
refused while there is no room and accepted again once there is. The free-space check is
what decides "there is room again" (a write that fails tells only that there was none).
"""

from __future__ import annotations

import errno
import os
import sqlite3
import time
from pathlib import Path

#: errno values that mean "no room", whatever the filesystem.
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
#: Room needed, beyond any configured threshold, before writes are tried again after a
#: failure: a few entries and a metadata commit.
RESUME_MARGIN_BYTES = 1024 * 1024


def is_out_of_space(exc: BaseException) -> bool:
    """True for an OSError with ENOSPC/EDQUOT, or SQLite's "database or disk is full"."""
    if isinstance(exc, OSError):
        return exc.errno in _NO_SPACE
    if isinstance(exc, sqlite3.Error):
        return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL
    return False


class DiskSpace:
    """Bytes available to this process on ``path``'s filesystem, read at most every ``interval_s``.

    ``min_free_bytes`` > 0 is the threshold below which new writes are refused before the
    disk is actually full (0: only a real ENOSPC refuses them).
    """

    def __init__(self, path: Path, min_free_bytes: int = 0, interval_s: float = 0.1) -> None:
        self.path = path
        self.min_free_bytes = min_free_bytes
        self._interval_s = interval_s
        self._checked_at = -float("inf")
        self._available = 0

    def available(self) -> int:
        now = time.monotonic()
        if now - self._checked_at >= self._interval_s:
            try:
                st = os.statvfs(self.path)
                self._available = st.f_bavail * st.f_frsize
            except OSError:
                self._available = 0
            self._checked_at = now
        return self._available

    def below_threshold(self) -> bool:
        """True when a threshold is set and the free space is under it."""
        return self.min_free_bytes > 0 and self.available() < self.min_free_bytes

    def has_room_to_resume(self, needed: int = 0) -> bool:
        """True when there is room to try writes again after they failed for lack of it: for the
        ``needed`` bytes of the add that failed, and a margin. Less would admit a producer whose
        next send fails the same way, over and over (each failure closes it, its client re-creates
        it at once and sends again, and the send never ends)."""
        return self.available() >= self.min_free_bytes + RESUME_MARGIN_BYTES + needed
