"""The read-ahead cache's fetches and who hears of them (pure: a store the test answers for)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from magnetar.storage.errors import OffloadedReadError, OffloadedReadPending
from magnetar.storage.tiered_reads import TieredReads


class HeldStore:
    """An ObjectReader whose fetches run on threads and end when the test says: with the bytes
    (``release``) or with an error (``fail``)."""

    def __init__(self) -> None:
        self.outcomes: dict[str, threading.Event] = {}
        self.errors: dict[str, str] = {}
        self.threads: list[threading.Thread] = []

    def read_range(self, key: str, start: int, end: int) -> bytes:
        assert self.outcomes.setdefault(key, threading.Event()).wait(10)
        if key in self.errors:
            raise ConnectionError(self.errors[key])
        return bytes(range(start, end))

    def submit(self, work: Callable[[], None]) -> None:
        thread = threading.Thread(target=work)
        self.threads.append(thread)
        thread.start()

    def release(self, key: str) -> None:
        self.outcomes.setdefault(key, threading.Event()).set()

    def fail(self, key: str, error: str) -> None:
        self.errors[key] = error
        self.release(key)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(10)


def _pending(reads: TieredReads, key: str) -> OffloadedReadPending:
    with pytest.raises(OffloadedReadPending) as pending:
        reads.read(key, 100, 0, 10)
    return pending.value


def test_then_is_called_once_the_fetch_is_over_or_at_once_if_it_is():
    store = HeldStore()
    reads = TieredReads(store, cache_bytes=1000, block_bytes=100, prefetch_blocks=0, retry_seconds=5)
    pending = _pending(reads, "a")
    heard: list[str] = []
    pending.then(lambda: heard.append("first"))
    assert heard == []
    store.release("a")
    store.join()
    assert heard == ["first"] and pending.ready.is_set()
    pending.then(lambda: heard.append("late"))  # over already: called at once
    assert heard == ["first", "late"]
    assert reads.read("a", 100, 0, 10) == bytes(range(10))


def test_a_failing_fetch_wakes_the_readers_of_other_fetches_which_then_fail_at_once():
    store = HeldStore()
    reads = TieredReads(store, cache_bytes=1000, block_bytes=100, prefetch_blocks=0, retry_seconds=60)
    slow = _pending(reads, "slow")  # hangs (a store that stopped answering)
    woken = threading.Event()
    slow.then(woken.set)
    _pending(reads, "failing")
    store.fail("failing", "connection refused")
    assert woken.wait(10)  # before its own fetch is over
    assert not slow.ready.is_set()
    with pytest.raises(OffloadedReadError, match="connection refused"):
        reads.read("slow", 100, 0, 10)  # the store is known to fail: no new fetch, no wait
    store.release("slow")
    store.join()
    assert reads.figures.failures == 1 and reads.figures.fetches == 1
