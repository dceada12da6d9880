"""The object store as tiered storage uses it: range reads on reader threads (storage's
``ObjectReader``), uploads of a ledger's files as one object with its CRC32C, verification by
reading it back, deletes."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import crc32c
import obstore
from obstore.store import ObjectStore

from magnetar.offload.settings import OffloadSettings
from magnetar.offload.workers import DaemonWorkers

#: Bytes read from a local file, or back from the store, at a time.
CHUNK = 4 * 1024 * 1024


class OffloadVerifyError(Exception):
    """The object read back is not what was written (size or CRC32C)."""


class OffloadCancelled(Exception):
    """The broker is stopping: the upload (or its verification) was given up, not counted done."""


def _never() -> bool:
    return False


class ObjectIO:
    """Reads, writes and deletes objects of one store; range reads run on ``read_threads`` threads."""

    def __init__(self, store: ObjectStore, settings: OffloadSettings) -> None:
        self.store = store
        self.settings = settings
        self._readers = DaemonWorkers(settings.read_threads, "magnetar-offload-read")

    # -- storage's ObjectReader ---------------------------------------------------------------
    def read_range(self, key: str, start: int, end: int) -> bytes:
        return bytes(obstore.get_range(self.store, key, start=start, end=end))

    def submit(self, work: Callable[[], None]) -> None:
        self._readers.submit(work)

    # -- writing -----------------------------------------------------------------------------------
    def upload(
        self,
        key: str,
        log_path: Path,
        log_size: int,
        index: bytes,
        cancelled: Callable[[], bool] = _never,
    ) -> tuple[int, int]:
        """Write the first ``log_size`` bytes of the log file, then ``index``, as the one object
        ``key``; returns (bytes written, their CRC32C). The object appears whole or not at all (a
        single PUT, or a multipart upload completed last). ``cancelled`` is asked before each
        chunk: OffloadCancelled then (a multipart upload is not completed)."""
        written = [0, 0]  # size, crc

        def chunks() -> Iterator[bytes]:
            with open(log_path, "rb") as f:
                left = log_size
                while left > 0:
                    if cancelled():
                        raise OffloadCancelled(f"the upload of {key} was given up: the broker is stopping")
                    data = f.read(min(CHUNK, left))
                    if not data:
                        raise OSError(f"{log_path} is shorter than the {log_size} bytes its ledger holds")
                    left -= len(data)
                    yield count(data)
            if index:
                yield count(index)

        def count(data: bytes) -> bytes:
            written[0] += len(data)
            written[1] = crc32c.crc32c(data, written[1])
            return data

        total = log_size + len(index)
        block = self.settings.max_block_size_in_bytes
        if total <= block:  # one PUT: read the files whole
            data = b"".join(chunks())
            if cancelled():
                raise OffloadCancelled(f"the upload of {key} was given up: the broker is stopping")
            obstore.put(self.store, key, data, use_multipart=False)
        else:
            obstore.put(self.store, key, chunks(), chunk_size=max(5 * 1024 * 1024, block), max_concurrency=4)
        return written[0], written[1]

    def verify(self, key: str, size: int, checksum: int, cancelled: Callable[[], bool] = _never) -> None:
        """Read the object back: its size and CRC32C must be what was written (OffloadVerifyError);
        OffloadCancelled when ``cancelled`` says so between requests."""
        if cancelled():
            raise OffloadCancelled(f"the verification of {key} was given up: the broker is stopping")
        head = obstore.head(self.store, key)
        if head["size"] != size:
            raise OffloadVerifyError(f"object {key} holds {head['size']} bytes, {size} were written")
        crc = 0
        for start in range(0, size, CHUNK):
            if cancelled():
                raise OffloadCancelled(f"the verification of {key} was given up: the broker is stopping")
            crc = crc32c.crc32c(
                bytes(obstore.get_range(self.store, key, start=start, end=min(size, start + CHUNK))), crc
            )
        if crc != checksum:
            raise OffloadVerifyError(
                f"object {key} read back with CRC32C {crc:#010x}, {checksum:#010x} was written"
            )

    def delete(self, key: str) -> None:
        """Delete ``key``; one that is not there counts as deleted."""
        with contextlib.suppress(FileNotFoundError):
            obstore.delete(self.store, key)

    def exists(self, key: str) -> bool:
        try:
            obstore.head(self.store, key)
        except FileNotFoundError:
            return False
        return True

    def close(self) -> None:
        """Reads not started are dropped; one inside a request ends with the process."""
        self._readers.shutdown(0)
