"""Writes that fail part-way, made real with RLIMIT_FSIZE (the kernel cuts a write at the limit and
fails the rest with EFBIG, as a full disk cuts it with ENOSPC): a failed append leaves the ledger
as it was, the managed ledger takes adds again without being reopened, and what was confirmed is
exactly what a reopen finds. (A full filesystem itself: tests/interop/test_full_disk.py.)"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.storage import Storage, StorageConfig
from magnetar.storage.errors import ManagedLedgerFencedError
from magnetar.storage.segment import Segment, segment_paths
from tests.storage.conftest import TOPIC, Durable, add_durable, payloads
from tests.waiting import eventually


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past ``limit`` bytes of any file fail with EFBIG (SIGXFSZ ignored) inside the block."""
    previous_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    previous = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous)
        signal.signal(signal.SIGXFSZ, previous_handler)


def test_failed_append_leaves_the_segment_as_it_was(tmp_path: Path):
    segment = Segment.create(tmp_path, 1)
    for data in payloads(3, size=1000):
        segment.append(data)
    size = segment.size_bytes
    with file_size_limit(size + 500), pytest.raises(OSError):
        segment.append(b"x" * 1000)  # 500 bytes get written, then EFBIG
    assert (segment.entries, segment.size_bytes) == (3, size)
    assert os.path.getsize(segment_paths(tmp_path, 1)[0]) == size  # the torn bytes are gone
    segment.append(b"after")
    segment.close()
    recovered = Segment.recover(tmp_path, 1)
    assert [bytes(d) for d in recovered.read_range(0, 10)] == [*payloads(3, size=1000), b"after"]
    recovered.close()


def test_truncate_to_drops_unconfirmed_entries_for_good(tmp_path: Path):
    segment = Segment.create(tmp_path, 1)
    for data in payloads(5):
        segment.append(data)
    segment.sync()
    for data in payloads(3, tag="unconfirmed"):
        segment.append(data)
    segment.truncate_to(5)
    segment.append(b"next")
    segment.close()
    recovered = Segment.recover(tmp_path, 1)
    assert [bytes(d) for d in recovered.read_range(0, 10)] == [*payloads(5), b"next"]
    recovered.close()


def test_managed_ledger_takes_adds_again_after_a_failed_write(tmp_path: Path):
    storage = Storage(StorageConfig(tmp_path / "data", preallocate_bytes=0))
    try:
        ml = storage.open_managed_ledger(TOPIC)
        before = add_durable(ml, payloads(5, size=1000, tag="before"))
        (log_path,) = (tmp_path / "data").rglob(f"{before[0].ledger_id:020d}.log")
        with file_size_limit(os.path.getsize(log_path) + 500), pytest.raises(ManagedLedgerFencedError):
            ml.add_entry(b"x" * 1000)
        assert ml.fenced and not ml.writable and ml.write_errors == 1

        def added() -> bool:
            with contextlib.suppress(ManagedLedgerFencedError):  # refused until RESUME_DELAY_S passed
                add_durable(ml, [b"after"])
                return True
            return False

        eventually(added, timeout=10, what="adds accepted again after the failed write")
        assert ml.writable and not ml.fenced
        expected = [*payloads(5, size=1000, tag="before"), b"after"]
        assert [bytes(e.data) for e in ml.read_entries(before[0], 100)] == expected
    finally:
        storage.close()
    storage = Storage(StorageConfig(tmp_path / "data", preallocate_bytes=0))
    try:
        reopened = storage.open_managed_ledger(TOPIC)
        assert [bytes(e.data) for e in reopened.read_entries(before[0], 100)] == expected
    finally:
        storage.close()


@pytest.mark.slow
def test_after_a_failed_fsync_the_unconfirmed_entries_are_dropped_and_adds_resume(open_storage):
    """The fsync fails for real (the log's fd is swapped for /dev/null between the write and the
    group commit's fdatasync, which fails there with EINVAL): the entry written but never
    confirmed must never become readable, and adds go on after it without a reopen."""
    ml = open_storage(fsync_policy="interval", fsync_interval_ms=300).open_managed_ledger(TOPIC)
    kept = add_durable(ml, [b"kept"])
    log_fd = ml._current._log_fd
    saved = os.dup(log_fd)
    durable = Durable()
    ml.add_entry(b"lost", durable)  # written to the real file; its round waits up to 300 ms
    null_fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(null_fd, log_fd)
    os.close(null_fd)
    durable.wait(1)
    assert durable.results[0][0] is None and isinstance(durable.results[0][1], OSError)
    assert ml.fenced
    os.dup2(saved, log_fd)
    os.close(saved)

    def added() -> bool:
        with contextlib.suppress(ManagedLedgerFencedError):  # refused until RESUME_DELAY_S passed
            add_durable(ml, [b"after"])
            return True
        return False

    eventually(added, timeout=10, what="adds accepted again after the failed fsync")
    assert [bytes(e.data) for e in ml.read_entries(kept[0], 10)] == [b"kept", b"after"]
    ml.close()
    reopened = open_storage().open_managed_ledger(TOPIC)
    assert [bytes(e.data) for e in reopened.read_entries(kept[0], 10)] == [b"kept", b"after"]
