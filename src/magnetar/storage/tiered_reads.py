"""Reading offloaded ledgers from the object store: ranges, through a bounded read-ahead cache.

Storage does no network I/O itself (docs/architecture.md): the object store is an
``ObjectReader`` handed in by the broker (``magnetar.offload`` implements it). A read names an
object and a byte range; the range is served from cached blocks of ``block_bytes`` when they are
all there, else the blocks it needs and ``prefetch_blocks`` more are fetched on a reader thread,
and the read raises ``OffloadedReadPending`` (``ready`` set when the fetch is over; ``on_ready``
called then, on the reader thread; ``then`` takes more callbacks). A reader that may wait (a
thread) waits and reads again; one on the event loop (a dispatcher, a seek, a peek, an index
look-up) goes on with other work and is woken up.

A failed fetch fails every read of offloaded data for ``retry_seconds`` at once with
``OffloadedReadError`` (the store's error in it), without touching the store: a store that is down
costs the event loop nothing, local ledgers are not affected, and the first read after the pause
tries the store again. It also wakes whoever waits for the other fetches under way (the store is
known to fail now: they read again and fail at once rather than wait for their own fetch's timeout).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.storage.errors import OffloadedReadError, OffloadedReadPending

log = logging.getLogger(__name__)


class ObjectReader(Protocol):
    """The object store as storage reads it."""

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the object ``key`` (blocking; raises on any failure)."""
        ...

    def submit(self, work: Callable[[], None]) -> None:
        """Run ``work`` on a reader thread."""
        ...


@dataclass
class ReadFigures:
    """What reads of offloaded data did, for stats and /metrics (Pulsar's offloader metrics)."""

    hits: int = 0
    fetches: int = 0
    fetched_bytes: int = 0
    failures: int = 0
    #: Seconds spent in fetches that worked, all together (latency = this / fetches).
    fetch_seconds: float = 0.0
    last_error: str = ""


@dataclass
class _Fetch:
    """One fetch under way; ``then`` callbacks run (once each) when it is over, or earlier when
    another fetch finds the store failing (``wake``)."""

    ready: threading.Event = field(default_factory=threading.Event)
    waiting: list[Callable[[], None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def then(self, call: Callable[[], None]) -> None:
        """Call ``call`` once the fetch is over (at once if it is); any thread."""
        with self.lock:
            if not self.ready.is_set():
                self.waiting.append(call)
                return
        call()

    def wake(self, done: bool) -> None:
        """Run the callbacks waiting now (``done``: the fetch is over, and ``ready`` is set first)."""
        with self.lock:
            if done:
                self.ready.set()
            calls, self.waiting = self.waiting, []
        for call in calls:
            try:
                call()
            except Exception:
                log.exception("a reader woken after a fetch raised")


class TieredReads:
    """The read-ahead cache and the fetches under way, shared by a Storage's managed ledgers."""

    def __init__(
        self,
        store: ObjectReader | None,
        cache_bytes: int,
        block_bytes: int,
        prefetch_blocks: int,
        retry_seconds: float,
    ) -> None:
        self._store = store
        self.cache_bytes = cache_bytes
        self.block_bytes = max(1, block_bytes)
        self.prefetch_blocks = max(0, prefetch_blocks)
        self.retry_seconds = retry_seconds
        self._blocks: OrderedDict[tuple[str, int], bytes] = OrderedDict()
        self._size = 0
        self._fetching: dict[tuple[str, int, int], _Fetch] = {}
        self._failed_at: float | None = None
        self._lock = threading.Lock()
        self.figures = ReadFigures()

    @property
    def configured(self) -> bool:
        return self._store is not None

    @property
    def cached_bytes(self) -> int:
        return self._size

    def read(
        self, key: str, object_size: int, start: int, end: int, on_ready: Callable[[], None] | None = None
    ) -> bytes:
        """Bytes ``[start, end)`` of ``key`` (an object of ``object_size`` bytes): from the cache, or
        ``OffloadedReadPending`` while they are fetched, or ``OffloadedReadError``."""
        if end <= start:
            return b""
        if self._store is None:
            raise OffloadedReadError(
                f"the object {key} is offloaded, but no offload driver is configured"
                " (managed_ledger_offload_driver): it cannot be read"
            )
        size = self.block_bytes
        first, last = start // size, (end - 1) // size
        with self._lock:
            got = self._cached(key, first, last)
            if got is not None:
                self.figures.hits += 1
                return got[start - first * size : end - first * size]
            failed_at = self._failed_at
            if failed_at is not None and time.monotonic() - failed_at < self.retry_seconds:
                raise OffloadedReadError(
                    f"the object store cannot be read ({self.figures.last_error}); offloaded data is tried"
                    f" again {self.retry_seconds:g} s after the failure"
                )
            fetch = self._joined(key, first, last)
            if fetch is None:
                stop = (
                    min(last + self.prefetch_blocks, (object_size - 1) // size) if object_size > 0 else last
                )
                stop = max(stop, last)
                fetch = self._fetching[(key, first, stop)] = _Fetch()
                self._store.submit(lambda: self._fetch(key, first, stop, object_size, fetch))
        if on_ready is not None:
            fetch.then(on_ready)
        raise OffloadedReadPending(
            f"fetching {key} bytes {start}..{end} from the object store", fetch.ready, fetch.then
        )

    def _cached(self, key: str, first: int, last: int) -> bytes | None:
        parts = []
        for block in range(first, last + 1):
            data = self._blocks.get((key, block))
            if data is None:
                return None
            parts.append(data)
        for block in range(first, last + 1):
            self._blocks.move_to_end((key, block))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _joined(self, key: str, first: int, last: int) -> _Fetch | None:
        for (k, a, b), fetch in self._fetching.items():
            if k == key and a <= first and last <= b:
                return fetch
        return None

    def _fetch(self, key: str, first: int, last: int, object_size: int, fetch: _Fetch) -> None:
        """On a reader thread: fetch blocks ``first..last`` of ``key`` into the cache."""
        size = self.block_bytes
        start = first * size
        end = (last + 1) * size if object_size <= 0 else min((last + 1) * size, object_size)
        began = time.monotonic()
        try:
            assert self._store is not None
            data = self._store.read_range(key, start, end)
            if len(data) != end - start:
                raise OffloadedReadError(
                    f"the object {key} is shorter than its ledger: got {len(data)} bytes of {start}..{end}"
                )
        except Exception as exc:
            with self._lock:
                self._failed_at = time.monotonic()
                self.figures.failures += 1
                self.figures.last_error = _one_line(exc)
                del self._fetching[(key, first, last)]
                others = list(self._fetching.values())
            log.warning("reading offloaded data failed: %s", self.figures.last_error)
            for other in others:  # the store is known to fail: their readers need not wait
                other.wake(done=False)
        else:
            with self._lock:
                self._failed_at = None
                self.figures.fetches += 1
                self.figures.fetched_bytes += len(data)
                self.figures.fetch_seconds += time.monotonic() - began
                fresh = set()
                for n, block in enumerate(range(first, last + 1)):
                    part = data[n * size : (n + 1) * size]
                    old = self._blocks.pop((key, block), None)
                    if old is not None:
                        self._size -= len(old)
                    self._blocks[(key, block)] = part
                    self._size += len(part)
                    fresh.add((key, block))
                self._evict(fresh)
                del self._fetching[(key, first, last)]
        finally:
            fetch.wake(done=True)

    def _evict(self, keep: set[tuple[str, int]]) -> None:
        """Oldest blocks out past the budget; the blocks just fetched stay (their reader comes next)."""
        while self._size > self.cache_bytes and self._blocks:
            oldest = next(iter(self._blocks))
            if oldest in keep:
                break
            self._size -= len(self._blocks.pop(oldest))

    def forget(self, key: str) -> None:
        """Drop the cached blocks of ``key`` (its ledger was deleted)."""
        with self._lock:
            for cached in [k for k in self._blocks if k[0] == key]:
                self._size -= len(self._blocks.pop(cached))


def _one_line(exc: BaseException) -> str:
    """The first line of an error (obstore appends a multi-line debug dump)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
