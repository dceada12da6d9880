"""Giving the memory of unloaded topics back to the system, where the allocator can.

An unloaded topic's objects are freed at once (storage/owner_ref.py), but freed memory goes back to
the system only where its allocator gives it back. CPython's own allocator (pymalloc, the default)
keeps small objects in 1 MiB arenas and returns an arena only once every object in it is gone:
after an idle sweep unloaded thousands of topics, the few objects that outlive them (a name
string, a dict entry) keep most arenas, so RSS stays near its peak, and the arenas are used again
for the next topics loaded. With ``PYTHONMALLOC=malloc`` every object is glibc's, freed pages
in the middle of its heap go back on ``malloc_trim``, and the broker calls it once an idle sweep's
closes are done (measured in docs/benchmarks.md: about 2 KiB per unloaded topic left, against
10 with pymalloc; a trim of a fragmented 1 GiB heap takes up to a second under glibc's arena
locks, so it is not called where it gives nothing back).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import time

log = logging.getLogger(__name__)


def _malloc_trim():
    """glibc's ``malloc_trim`` where the process runs on glibc's allocator for its objects; else None."""
    if os.environ.get("PYTHONMALLOC", "") not in ("malloc", "malloc_debug"):
        return None
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_TRIM = _malloc_trim()


def trims() -> bool:
    """Whether ``give_back`` does anything in this process."""
    return _TRIM is not None


def give_back() -> None:
    """Return the allocator's free pages to the system (a close thread calls it, after a sweep)."""
    if _TRIM is None:
        return
    started = time.monotonic()
    _TRIM(0)
    log.debug("malloc_trim after unloading idle topics: %.3f s", time.monotonic() - started)
