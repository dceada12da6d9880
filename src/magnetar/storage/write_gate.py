"""Whether a managed ledger accepts adds now, and why not: a full disk (or free space under
``min_free_disk_bytes``), or a failed fsync or write (fenced). A refusal is logged once per
episode, and adds are accepted again once there is room (and, after a failure, once the
unconfirmed entries are dropped, no sooner than ``RESUME_DELAY_S``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from magnetar.storage.disk_space import DiskSpace, is_out_of_space
from magnetar.storage.errors import ManagedLedgerFencedError, StorageError, StorageFullError

log = logging.getLogger(__name__)

#: After a failed fsync, writes are tried again no sooner than this (bounds retries and log lines).
RESUME_DELAY_S = 1.0


class WriteGate:
    """The add-refusing state of one managed ledger (``ManagedLedger`` asks it under its lock)."""

    def __init__(self, name: str, space: DiskSpace) -> None:
        self.name = name
        self.space = space
        #: The failed fsync or write that fenced the managed ledger; None while not fenced.
        self.failure: Exception | None = None
        self.failed_at = 0.0
        #: Why adds are refused now (None: they are accepted); logged once per episode.
        self.reason: str | None = None
        self._since = 0.0
        self._refused_in_episode = 0
        #: Adds refused or failed for lack of space or an I/O error, since opening (for /metrics).
        self.write_errors = 0
        #: The bytes of the add that found no room: the room wanted before adds are tried again.
        self.needed = 0

    def check(self, drop_unconfirmed: Callable[[], bool]) -> None:
        """Raise the error an add would get now. After a failure, ``drop_unconfirmed`` (called
        once the delay has passed and there is room) drops the unconfirmed entries, or says
        False when it cannot yet; writes resume once it did."""
        if self.failure is not None and not self._try_resume(drop_unconfirmed):
            self.refused()
            raise ManagedLedgerFencedError(
                f"{self.name}: writes refused after an I/O error: {self.failure}"
            ) from self.failure
        if self.reason is not None and not self.space.has_room_to_resume(self.needed):
            self.refused()  # still no room: refuse without touching the disk
            raise StorageFullError(f"{self.name}: {self.reason}")
        if self.space.below_threshold():
            self.refuse(
                f"the data directory has {self.space.available()} bytes free,"
                f" below min_free_disk_bytes={self.space.min_free_bytes}"
            )
            self.refused()
            raise StorageFullError(f"{self.name}: {self.reason}")

    def _try_resume(self, drop_unconfirmed: Callable[[], bool]) -> bool:
        if time.monotonic() - self.failed_at < RESUME_DELAY_S or not self.space.has_room_to_resume(
            self.needed
        ):
            return False
        if not drop_unconfirmed():
            return False
        self.failure = None
        return True

    def write_failed(self, exc: Exception, creating_ledger: int | None, needed: int = 0) -> StorageError:
        """An append (of ``needed`` bytes) or rollover failed; the segment is as it was before it.
        The error for the caller.

        No room: refused until there is room again for ``needed`` bytes and a margin (nothing to
        undo). Another I/O error: fenced,
        except half-way through a rollover (``creating_ledger``), whose old ledger is sealed with
        every entry fsynced (dropping any of them would contradict the committed entry count)."""
        if is_out_of_space(exc) or isinstance(exc, StorageFullError):
            self.needed = max(self.needed, needed)
            self.refuse(f"no space left on the data directory ({exc})")
            self.refused()
            return StorageFullError(f"{self.name}: {self.reason}")
        if creating_ledger is not None:
            self.refuse(f"creating ledger {creating_ledger} failed ({exc})")
            self.refused()
            return ManagedLedgerFencedError(f"{self.name}: {self.reason}")
        self.fence(exc)
        self.refused()
        return ManagedLedgerFencedError(f"{self.name}: write failed: {exc}")

    def fence(self, exc: Exception) -> None:
        """A failed fsync or write: unconfirmed entries are to be dropped before adds resume."""
        if self.failure is None:
            self.failure = exc
            self.failed_at = time.monotonic()
            self.refuse(f"an fsync or write failed, unconfirmed entries are dropped ({exc})")

    def refuse(self, reason: str) -> None:
        """Enter (or stay in) the state where adds are refused; logged once per episode."""
        if self.reason is None:
            self.reason = reason
            self._since = time.monotonic()
            log.error("%s: writes refused: %s; they resume once there is room", self.name, reason)

    def refused(self) -> None:
        self.write_errors += 1
        self._refused_in_episode += 1

    def resumed(self) -> None:
        """An add went through while adds were refused: they are accepted again."""
        log.warning(
            "%s: writes accepted again after %.1f s (%d adds refused meanwhile)",
            self.name,
            time.monotonic() - self._since,
            self._refused_in_episode,
        )
        self.reason = None
        self._refused_in_episode = 0
        self.needed = 0
