"""One broker per data directory: two processes appending to the same ledgers would corrupt them.

An exclusive ``flock`` on ``<data_dir>/broker.lock``; the kernel drops it when the process
ends, however it ends (``kill -9`` included), so a crashed broker never leaves a stale lock. The
lock belongs to the open file, not to one process: a supervisor passes its descriptor to its
workers (``fileno``), so that the lock is held until the last of them has flushed and exited, even
when the supervisor itself was killed first.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirError(RuntimeError):
    """The data directory cannot be used; the message says which and why, in one line."""


class DataDirInUse(DataDirError):
    pass


class DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / "broker.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:  # the first thing a start does there: its failure says what is wrong
            raise DataDirError(_unusable(self.path.parent, exc)) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise DataDirInUse(
                f"data directory {self.path.parent} is in use by another broker (pid {holder})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd

    def fileno(self) -> int:
        """The locked file's descriptor, for a child process to inherit (and the lock with it)."""
        if self._fd is None:
            raise DataDirError(f"{self.path} is not locked")
        return self._fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # the lock goes once no process holds the file open
            self._fd = None


def _unusable(data_dir: Path, exc: OSError) -> str:
    """``data directory D cannot be used: Permission denied``, naming the path that failed when it
    is another one (a parent that is a file)."""
    if isinstance(exc, FileExistsError):  # mkdir found something there that is no directory
        return f"data directory {data_dir} cannot be used: it is a file, not a directory"
    failed = f" ({exc.filename})" if exc.filename and Path(exc.filename) != data_dir else ""
    return f"data directory {data_dir} cannot be used: {exc.strerror or exc}{failed}"
