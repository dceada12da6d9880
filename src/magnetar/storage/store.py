"""Storage: the broker's one entry point to durable data."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable

from magnetar.storage.config import StorageConfig
from magnetar.storage.entry_cache import EntryCache
from magnetar.storage.errors import StorageClosedError
from magnetar.storage.managed_ledger import ManagedLedger, Notify
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.names import encode_name
from magnetar.storage.segment import fsync_directory
from magnetar.storage.syncer import Syncer

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.sqlite"
LEDGERS_DIR = "ledgers"


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
    ):
        self.config = config
        self._notify = notify
        self._ledgers_dir = config.data_dir / LEDGERS_DIR
        self._ledgers_dir.mkdir(parents=True, exist_ok=True)
        self.metadata = MetadataStore(config.data_dir / METADATA_FILE)
        self.entry_cache = EntryCache(config.entry_cache_bytes)
        self._syncer = Syncer(
            config.fsync_policy, config.fsync_interval_ms / 1000.0, defer, config.fsync_inline_max_ms / 1000.0
        )
        self._open: dict[str, ManagedLedger] = {}
        self._lock = threading.RLock()
        self._closed = False
        self._remove_orphan_directories()

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
        """The managed ledger ``name``, created if new and recovered if it was not closed cleanly."""
        with self._lock:
            self._check_open()
            ledger = self._open.get(name)
            if ledger is not None:
                return ledger
            record = self.metadata.managed_ledger(name)
            if record is None:
                record = self.metadata.create_managed_ledger(name, encode_name(name))
            directory = self._ledgers_dir / record.directory
            if not directory.exists():
                directory.mkdir()
                fsync_directory(self._ledgers_dir)
            ledger = ManagedLedger(
                record,
                directory,
                self.config,
                self.metadata,
                self._syncer,
                self.entry_cache,
                self._notify,
                self._forget,
            )
            self._open[name] = ledger
            return ledger

    def managed_ledger_names(self) -> list[str]:
        """Every managed ledger stored, open or not."""
        return self.metadata.managed_ledger_names()

    def delete_managed_ledger(self, name: str) -> None:
        """Close and delete a managed ledger with its cursors, properties and files; no-op if unknown."""
        with self._lock:
            self._check_open()
            ledger = self._open.get(name)
            if ledger is not None:
                ledger.close()
            record = self.metadata.managed_ledger(name)
            if record is None:
                return
            self.metadata.delete_managed_ledger(record.ml_id)
        shutil.rmtree(self._ledgers_dir / record.directory, ignore_errors=True)

    def close(self) -> None:
        """Close every managed ledger (fsyncing it), stop the fsync thread, close the metadata. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            ledgers = list(self._open.values())
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

    def _remove_orphan_directories(self) -> None:
        """Remove directories of managed ledgers whose deletion a crash interrupted."""
        known = self.metadata.managed_ledger_directories()
        for path in self._ledgers_dir.iterdir():
            if path.is_dir() and path.name not in known:
                log.warning("removing orphan managed-ledger directory %s", path)
                shutil.rmtree(path, ignore_errors=True)
