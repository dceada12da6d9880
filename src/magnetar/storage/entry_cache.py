"""Recently added entries kept in memory, so consumers at the tail read without a syscall."""

from __future__ import annotations

import threading
from collections import OrderedDict

from magnetar.storage.entry import EntryData
from magnetar.storage.position import Position

_Key = tuple[int, Position]
# What one cached entry costs besides its data: the bytes object, key tuple, Position and
# OrderedDict node (about 280 bytes measured with tracemalloc on CPython 3.11).
ENTRY_OVERHEAD = 256


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
            self._size += cost
            while self._size > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._size -= len(evicted) + ENTRY_OVERHEAD

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
            doomed = [
                key
                for key in self._entries
                if key[0] == owner and (ledger_ids is None or key[1].ledger_id in ledger_ids)
            ]
            for key in doomed:
                self._size -= len(self._entries.pop(key)) + ENTRY_OVERHEAD
