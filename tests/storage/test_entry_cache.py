"""The entry cache forgets one managed ledger's entries without going through every other's: with
100,000 topics unloading, each close scanned the whole cache under the lock that every add waits
for, and the broker slowed to a few new topics a second."""

from __future__ import annotations

from collections import OrderedDict

from magnetar.storage.entry_cache import ENTRY_OVERHEAD, EntryCache
from magnetar.storage.position import Position


class CountedEntries(OrderedDict):
    """The cache's entries, counting the times they are gone through whole."""

    scans = 0

    def __iter__(self):
        CountedEntries.scans += 1
        return super().__iter__()


def test_invalidating_one_owner_does_not_scan_the_others_entries():
    cache = EntryCache(1 << 20)
    cache._entries = CountedEntries()
    for owner in range(100):
        for entry in range(10):
            cache.put(owner, Position(1, entry), b"x")
    CountedEntries.scans = 0
    cache.invalidate(7)
    assert CountedEntries.scans == 0
    assert cache.get(7, Position(1, 0)) is None and cache.get(8, Position(1, 0)) == b"x"
    assert len(cache) == 990 and cache.size_bytes == 990 * (1 + ENTRY_OVERHEAD)


def test_invalidating_some_ledgers_and_evictions_keep_the_owners_apart():
    cache = EntryCache(3 * (1 + ENTRY_OVERHEAD))
    cache.put(1, Position(1, 0), b"a")
    cache.put(1, Position(2, 0), b"b")
    cache.put(2, Position(1, 0), b"c")
    cache.invalidate(1, {1})
    assert [cache.get(1, Position(1, 0)), cache.get(1, Position(2, 0))] == [None, b"b"]
    cache.put(3, Position(1, 0), b"d")
    cache.put(3, Position(1, 1), b"e")  # the budget: the oldest, owner 1's, goes
    assert cache.get(1, Position(2, 0)) is None and len(cache) == 3
    cache.invalidate(1)  # nothing left of it
    cache.invalidate(3)
    assert [cache.get(2, Position(1, 0))] == [b"c"] and cache.size_bytes == 1 + ENTRY_OVERHEAD
