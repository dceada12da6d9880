"""Storage: the broker's one entry point to durable data."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

from magnetar.storage.callbacks import Notify
from magnetar.storage.config import StorageConfig
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import ManagedLedgerNotFoundError, MetadataMissingError, StorageClosedError
from magnetar.storage.followed_ledger import FollowedLedger
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.names import encode_name
from magnetar.storage.orphans import move_aside
from magnetar.storage.segment import fsync_directory
from magnetar.storage.syncer import Syncer
from magnetar.storage.tiered_reads import ObjectReader, TieredReads

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.sqlite"
LEDGERS_DIR = "ledgers"
#: A managed-ledger directory renamed with this suffix is being deleted by an explicit call.
DELETING_SUFFIX = ".deleting"
REPAIR_HINT = "magnetar repair --data-dir {data_dir}"


class Storage:
    """Managed ledgers under one data directory, sharing a metadata store, an fsync thread and a cache.

    One per broker process. ``notify`` is how completion callbacks reach the
    owner's thread (a broker passes ``loop.call_soon_threadsafe``); without it
    callbacks run in whichever thread completes the work. ``defer`` runs a
    callable on the owner's thread later in its current pass (a broker's event
    loop): with it, group-commit rounds of the ``always`` policy run there while
    fsyncs are fast (see ``syncer.py``). Create the Storage on the owner's thread.
    """

    def __init__(
        self,
        config: StorageConfig,
        notify: Notify | None = None,
        defer: Callable[[Callable[[], None]], None] | None = None,
        check_directories: bool = True,
        object_reader: ObjectReader | None = None,
    ):
        """``check_directories``: account for every managed-ledger directory first
        (``_check_directories``); off in a broker worker, whose supervisor checked them once before
        any worker started (a worker would move aside a directory another one just made).
        ``object_reader``: the object store offloaded ledgers are read from (tiered storage; None:
        reads of an offloaded ledger fail with ``OffloadedReadError``)."""
        self.config = config
        self._notify = notify
        self._ledgers_dir = config.data_dir / LEDGERS_DIR
        self._ledgers_dir.mkdir(parents=True, exist_ok=True)
        metadata_path = config.data_dir / METADATA_FILE
        if not metadata_path.exists():
            _refuse_without_metadata(config.data_dir, self._ledgers_dir, "is missing")
        self.metadata = MetadataStore(metadata_path)
        self.entry_cache = EntryCache(config.entry_cache_bytes)
        #: Offloaded ledgers' reads: the read-ahead cache and the fetches under way (tiered_reads.py).
        self.tiered = TieredReads(
            object_reader,
            config.offload_read_cache_bytes,
            config.offload_read_block_bytes,
            config.offload_prefetch_blocks,
            config.offload_read_retry_seconds,
        )
        self._syncer = Syncer(
            config.fsync_policy, config.fsync_interval_ms / 1000.0, defer, config.fsync_inline_max_ms / 1000.0
        )
        self._open: dict[str, ManagedLedger] = {}
        #: Managed ledgers other processes write, read here (``follow_managed_ledger``).
        self._followed: set[ManagedLedger] = set()
        #: Names being opened (by any thread), so a second caller waits for the first.
        self._opening: dict[str, threading.Event] = {}
        self._lock = threading.RLock()
        self._closed = False
        try:
            if check_directories:
                self._check_directories()
        except BaseException:
            self._syncer.stop()
            self.metadata.close()
            raise

    def __enter__(self) -> Storage:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def fsync_count(self) -> int:
        """fdatasync calls made so far (group commits, rollovers, closes)."""
        return self._syncer.fsync_count

    @property
    def sync_rounds(self) -> int:
        """Group-commit rounds run, by the fsync thread or on the owner's loop."""
        return self._syncer.rounds

    @property
    def inline_sync_rounds(self) -> int:
        """Group-commit rounds run on the owner's thread through ``defer``."""
        return self._syncer.inline_rounds

    def open_managed_ledger(self, name: str) -> ManagedLedger:
        """The managed ledger ``name``, created if new and recovered if it was not closed cleanly.

        Safe from any thread, and slow (files created and fsynced, commits): a broker calls it
        on a worker thread so its loop goes on meanwhile (``docs/architecture.md``). Opens of
        different names run side by side; a second open of one name waits for the first.
        """
        while True:
            with self._lock:
                self._check_open()
                ledger = self._open.get(name)
                if ledger is not None:
                    return ledger
                busy = self._opening.get(name)
                if busy is None:
                    busy = self._opening[name] = threading.Event()
                    break
            busy.wait()
        try:
            ledger = self._open_new(name)
            with self._lock:
                if self._closed:
                    ledger.close()
                    raise StorageClosedError("storage is closed")
                self._open[name] = ledger
            return ledger
        finally:
            with self._lock:
                del self._opening[name]
            busy.set()

    def _open_new(self, name: str) -> ManagedLedger:
        record = self.metadata.managed_ledger(name)
        if record is None:
            record = self.metadata.create_managed_ledger(name, encode_name(name))
        directory = self._ledgers_dir / record.directory
        if not directory.exists():
            directory.mkdir(exist_ok=True)  # as in ``CursorLedger.create``: another open may make it too
            fsync_directory(self._ledgers_dir)
        return ManagedLedger(
            record,
            directory,
            self.config,
            self.metadata,
            self._syncer,
            self.entry_cache,
            self._notify,
            self._forget,
            self.tiered,
        )

    def follow_managed_ledger(self, name: str, follower: str) -> FollowedLedger:
        """The managed ledger ``name`` that another process writes, opened here to read it as it
        grows (``followed_ledger.py``); ManagedLedgerNotFoundError when it is not stored (yet). Reads the
        metadata store: call it off the owner's loop. Each call opens a view of its own."""
        with self._lock:
            self._check_open()
        record = self.metadata.managed_ledger(name)
        if record is None:
            raise ManagedLedgerNotFoundError(f"managed ledger {name} is not stored")
        ledger = FollowedLedger(
            record,
            self._ledgers_dir / record.directory,
            self.config,
            self.metadata,
            self.entry_cache,
            follower,
            self._forget_followed,
            self._notify,
            self.tiered,
        )
        with self._lock:
            if self._closed:
                ledger.close()
                raise StorageClosedError("storage is closed")
            self._followed.add(ledger)
        return ledger

    def _forget_followed(self, ledger: ManagedLedger) -> None:
        with self._lock:
            self._followed.discard(ledger)

    def has_managed_ledger(self, name: str) -> bool:
        """Whether ``name`` is stored (one indexed look-up, not a list of every name)."""
        return name in self._open or self.metadata.managed_ledger(name) is not None

    def managed_ledger_names(self, prefix: str = "") -> list[str]:
        """Every managed ledger stored whose name starts with ``prefix``, open or not, sorted."""
        return self.metadata.managed_ledger_names(prefix)

    def count_managed_ledgers(self, prefix: str) -> int:
        """How many managed ledgers stored have a name starting with ``prefix``."""
        return self.metadata.count_managed_ledgers(prefix)

    def delete_managed_ledger(self, name: str) -> None:
        """Close and delete a managed ledger with its cursors, properties and files; no-op if unknown.

        The directory is first renamed to ``<dir>.deleting`` (durably), then the rows go, then the
        files: a crash anywhere in between leaves a directory that says it was meant to go, which
        the next start finishes deleting. A directory without that mark is never deleted.
        """
        with self._lock:
            self._check_open()
            ledger = self._open.get(name)
            if ledger is not None:
                ledger.close()
            record = self.metadata.managed_ledger(name)
            if record is None:
                return
            directory = self._ledgers_dir / record.directory
            doomed = directory.with_name(directory.name + DELETING_SUFFIX)
            if directory.exists():
                directory.rename(doomed)
                fsync_directory(self._ledgers_dir)
            self.metadata.delete_managed_ledger(record.ml_id)
        shutil.rmtree(doomed, ignore_errors=True)

    def close(self) -> None:
        """Close every managed ledger (fsyncing it), stop the fsync thread, close the metadata. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ledgers = [*self._open.values(), *self._followed]
        try:
            for ledger in ledgers:
                try:
                    ledger.close()
                except Exception:
                    log.exception("closing managed ledger %s failed", ledger.name)
        finally:
            self._syncer.stop()
            self.metadata.close()

    def _forget(self, ledger: ManagedLedger) -> None:
        with self._lock:
            if self._open.get(ledger.name) is ledger:
                del self._open[ledger.name]

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosedError("storage is closed")

    def _check_directories(self) -> None:
        """Account for every managed-ledger directory before serving anything.

        ``<dir>.deleting``: an explicit delete a crash interrupted; it is finished. A directory
        the metadata store does not know: if the store knows no managed ledger at all, the
        metadata was lost and the start is refused (``MetadataMissingError``, nothing touched);
        otherwise it is moved aside to ``<data dir>/orphaned/`` with a warning.
        """
        known = self.metadata.managed_ledger_directories()
        # Names, not paths, compared as a set: with 100,000 topics on disk this is what start-up
        # walks, and only the directories it must act on become paths.
        unknown = []
        for name in sorted(set(os.listdir(self._ledgers_dir)) - known):
            path = self._ledgers_dir / name
            if name.endswith(DELETING_SUFFIX):
                record = self.metadata.managed_ledger_by_directory(name[: -len(DELETING_SUFFIX)])
                if record is not None:
                    self.metadata.delete_managed_ledger(record.ml_id)
                log.info("finishing the deletion of managed-ledger directory %s", path)
                shutil.rmtree(path, ignore_errors=True)
            else:
                unknown.append(path)
        if not unknown:
            return
        if not known:
            _refuse_without_metadata(self.config.data_dir, self._ledgers_dir, "knows no managed ledger")
        for path in unknown:
            move_aside(
                self.config.data_dir,
                path,
                f"the metadata store {self.metadata.path} has no managed ledger in this directory"
                f" (run {REPAIR_HINT.format(data_dir=self.config.data_dir)} after moving it back"
                " to rebuild its metadata)",
            )


def _refuse_without_metadata(data_dir: Path, ledgers_dir: Path, what: str) -> None:
    """Raise MetadataMissingError when managed-ledger directories exist; no-op when there are none."""
    directories = [p for p in ledgers_dir.iterdir() if not p.name.endswith(DELETING_SUFFIX)]
    if directories:
        raise MetadataMissingError(
            f"the metadata store {data_dir / METADATA_FILE} {what}, but {len(directories)} managed-ledger"
            f" directories are in {ledgers_dir}: refusing to start, nothing was changed or deleted."
            f" Run `{REPAIR_HINT.format(data_dir=data_dir)}` (with the broker stopped) to rebuild the"
            " metadata from the ledger files, then start the broker again."
        )
