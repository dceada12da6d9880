"""One file descriptor held back for the moment none is left: to accept a connection only to answer it.

With no descriptor left, accept() fails with EMFILE and a waiting client would hear nothing. The
listener (listener.py) then closes the spare, which frees exactly one descriptor, accepts the
connection on it, answers it (refusal.py) and, once that connection is closed, takes the spare
again. One spare serves the whole process: a listener that finds it lent waits for it to come back.
"""

from __future__ import annotations

import os
from collections.abc import Callable


class SpareDescriptor:
    """An open ``/dev/null``: held, lent (closed, its number in use by a connection being refused), or
    missing (it could not be taken again yet: ``hold`` tries again)."""

    def __init__(self, path: str = os.devnull) -> None:
        self._path = path
        self._fd: int | None = None
        self._lent = False
        self._waiting: list[Callable[[], None]] = []

    @property
    def held(self) -> bool:
        return self._fd is not None

    def hold(self) -> bool:
        """Take the spare unless it is held or lent; False while no descriptor is free for it."""
        if self._fd is None and not self._lent:
            try:
                self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return False
        return self._fd is not None

    def lend(self) -> bool:
        """Close the spare, leaving one descriptor free for the caller, who must ``give_back`` once
        it is closed again; False when there is none to lend (lent already, or missing)."""
        if not self.hold():
            return False
        assert self._fd is not None
        os.close(self._fd)
        self._fd = None
        self._lent = True
        return True

    def give_back(self) -> None:
        """The descriptor lent is closed: take the spare again, and wake whoever waited for it."""
        self._lent = False
        self.hold()
        waiting, self._waiting = self._waiting, []
        for callback in waiting:
            callback()

    def when_back(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` at the next ``give_back`` (once, however often it is asked)."""
        if callback not in self._waiting:
            self._waiting.append(callback)


#: The process's spare (one process, one limit).
SPARE = SpareDescriptor()
