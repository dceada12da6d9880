"""``LedgerOffloader`` (Pulsar's name): a closed ledger copied to the object store, verified, and
recorded in the metadata store as offloaded; the objects nothing owns any more, deleted.

An attempt is recorded (its key, state ``offloading``) before a byte is sent; the ledger counts as
offloaded only once the object read back has the size and CRC32C that were written. An attempt
that fails (the store is down, the process is killed) is given up (its key queued for deletion,
at once or when the managed ledger next opens) and the ledger is offloaded again later under a new
key: a partial object is never counted done, and never read.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from magnetar.offload.drivers import open_store
from magnetar.offload.object_io import ObjectIO, OffloadCancelled
from magnetar.offload.settings import OffloadSettings
from magnetar.offload.workers import DaemonWorkers
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)

#: How long a stopping broker waits for uploads under way to give up (at their next chunk).
SHUTDOWN_WAIT_S = 2.0


@dataclass
class OffloadFigures:
    """What offloads did since start (stats and /metrics, Pulsar's offloader metrics)."""

    ledgers: int = 0
    bytes: int = 0
    errors: int = 0
    seconds: float = 0.0
    deleted_objects: int = 0
    #: Attempts given up because the broker stopped (not errors: made again after the restart).
    cancelled: int = 0
    last_error: str = ""


def object_key(ml: ManagedLedger, ledger_id: int) -> str:
    """A new key for one attempt at ``ledger_id``: the managed ledger's directory name (``%``, which
    object keys handle badly, as ``~``, which directory names never hold), the ledger id and a
    random suffix, so a retry never meets what an earlier attempt left."""
    directory = ml.directory.name.replace("%", "~")
    return f"{directory}/{ledger_id:020d}-{uuid.uuid4().hex[:16]}.ledger"


class LedgerOffloader:
    """Copies ledgers to one object store on ``max_threads`` threads."""

    def __init__(self, settings: OffloadSettings, io: ObjectIO | None = None) -> None:
        self.settings = settings
        self.io = io if io is not None else ObjectIO(open_store(settings), settings)
        self._executor = DaemonWorkers(settings.max_threads, "magnetar-offload")
        #: Set when the broker stops: uploads under way are given up at their next chunk.
        self.stopping = threading.Event()
        self.figures = OffloadFigures()

    def submit(self, work: Any, *args: Any) -> Future:
        """Run ``work(*args)`` on an offload thread."""
        return self._executor.submit(work, *args)

    def offload_ledger(self, ml: ManagedLedger, ledger_id: int) -> bool:
        """Copy, verify and record one closed ledger (blocking: an offload thread's work). False when
        it is not to be offloaded now (gone, already offloaded, or deleted meanwhile); raises when
        the attempt failed (given up: the ledger stays local and is offloaded again later)."""
        key = object_key(ml, ledger_id)
        if not ml.begin_offload(ledger_id, key):
            return False
        began = time.monotonic()
        stopping = self.stopping.is_set
        try:
            if stopping():
                raise OffloadCancelled(
                    f"the offload of ledger {ledger_id} was given up: the broker is stopping"
                )
            log_path, log_size, index = ml.offload_source(ledger_id)
            size, checksum = self.io.upload(key, log_path, log_size, index, stopping)
            self.io.verify(key, size, checksum, stopping)
            if stopping():
                raise OffloadCancelled(
                    f"the offload of ledger {ledger_id} was given up: the broker is stopping"
                )
        except BaseException as exc:
            if isinstance(exc, OffloadCancelled):
                self.figures.cancelled += 1
                log.info(
                    "%s: the offload of ledger %d was given up (the broker stops); it is done again"
                    " after the restart",
                    ml.name,
                    ledger_id,
                )
            else:
                self.figures.errors += 1
                self.figures.last_error = _one_line(exc)
            try:
                ml.abort_offload(ledger_id, key)
            except Exception as abort:  # the next open of the managed ledger gives it up
                log.warning("%s: giving up the offload of ledger %d: %s", ml.name, ledger_id, abort)
            raise
        if not ml.complete_offload(ledger_id, key, size, checksum):
            self.io.delete(key)  # the ledger went meanwhile: nothing owns the object
            return False
        self.figures.ledgers += 1
        self.figures.bytes += size
        self.figures.seconds += time.monotonic() - began
        log.info("%s: offloaded ledger %d (%d bytes) to %s", ml.name, ledger_id, size, key)
        return True

    def sweep_garbage(self, metadata: MetadataStore, limit: int = 100) -> int:
        """Delete objects no ledger owns any more (trimmed ledgers, deleted topics, attempts given
        up); returns how many. Blocking: an offload thread's work."""
        keys = metadata.offload_garbage(limit)
        done = []
        for key in keys:
            if self.stopping.is_set():
                break
            self.io.delete(key)
            done.append(key)
        if done:
            metadata.forget_offload_garbage(done)
            self.figures.deleted_objects += len(done)
        return len(done)

    def close(self, wait_seconds: float = SHUTDOWN_WAIT_S) -> bool:
        """Stop: uploads and deletes not started are dropped, those under way are given up at their
        next chunk (an attempt given up is not counted done, and is made again after a restart);
        waits at most ``wait_seconds`` for them (one inside a request to a store that hangs is left
        to end with the process). True when nothing runs any more."""
        self.stopping.set()
        idle = self._executor.shutdown(wait_seconds)
        if not idle:
            log.warning(
                "an offload is still inside a request to the object store; the broker stops without"
                " waiting for it (its attempt is given up when its topic next opens)"
            )
        self.io.close()
        return idle


def _one_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"
