"""Recently added entries kept in memory, so consumers at the tail read without a syscall."""

from __future__ import annotations

import threading
from collections import OrderedDict

from magnetar.storage.entry import EntryData
from magnetar.storage.position import Position

_Key = tuple[int, Position]
# What one cached entry costs besides its data: the bytes object, key tuple, Position and
# OrderedDict node (about 280 bytes measured with tracemalloc on CPython 3.11), and its place in
# its owner's set.
ENTRY_OVERHEAD = 320


class EntryCache:
    """One byte budget shared by every managed ledger of a Storage; the oldest additions go first.

    Only ``add_entry`` fills it: a consumer that catches up with the tail reads
    what producers just wrote, while replays of old data go to the files and do
    not push the tail out. Each entry counts its data plus ``ENTRY_OVERHEAD``, so
    the budget bounds real memory even for tiny entries.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[_Key, EntryData] = OrderedDict()
        #: Each owner's cached positions: an owner's entries are forgotten (a managed ledger
        #: closed, an unloaded topic) without a scan of every other owner's (100,000 topics
        #: unloading scanned the whole cache each, holding the lock that adds wait for).
        self._by_owner: dict[int, set[Position]] = {}
        self._size = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        return self._size

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, owner: int, position: Position, data: EntryData) -> None:
        cost = len(data) + ENTRY_OVERHEAD
        if cost > self.max_bytes:
            return
        with self._lock:
            old = self._entries.pop((owner, position), None)
            if old is not None:
                self._size -= len(old) + ENTRY_OVERHEAD
            self._entries[(owner, position)] = data
            self._by_owner.setdefault(owner, set()).add(position)
            self._size += cost
            while self._size > self.max_bytes:
                (evicted_owner, evicted_at), evicted = self._entries.popitem(last=False)
                self._size -= len(evicted) + ENTRY_OVERHEAD
                self._forget(evicted_owner, evicted_at)

    def get(self, owner: int, position: Position) -> EntryData | None:
        data = self._entries.get((owner, position))
        if data is None:
            self.misses += 1
        else:
            self.hits += 1
        return data

    def invalidate(self, owner: int, ledger_ids: set[int] | None = None) -> None:
        """Forget an owner's entries, or only those of some ledgers (after trim or delete)."""
        with self._lock:
            positions = self._by_owner.get(owner, set())
            doomed = [p for p in positions if ledger_ids is None or p.ledger_id in ledger_ids]
            for position in doomed:
                self._size -= len(self._entries.pop((owner, position))) + ENTRY_OVERHEAD
                self._forget(owner, position)

    def _forget(self, owner: int, position: Position) -> None:
        """Drop ``position`` from its owner's set (with the lock held)."""
        positions = self._by_owner[owner]
        positions.discard(position)
        if not positions:
            del self._by_owner[owner]
