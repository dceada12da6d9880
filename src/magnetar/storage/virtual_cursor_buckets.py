"""Virtual cursors stored in buckets: one row holds many, so a flush writes buckets, not cursors.

100K broadcast consumers acknowledging every second would otherwise mean 100K row upserts a
second (~1.7 µs each in SQLite, measured: ``bench/virtual_cursors.py``). A virtual cursor
belongs to one of ``BUCKETS`` buckets by a hash of its name, fixed for good, so no table of
assignments is kept and a virtual cursor never moves; a flush rewrites each bucket that holds a
changed one, whole. ("Page" is kept for PIP 81's pages of acknowledged positions.)

Stored as before the names changed: a bucket is a row of the ``place_pages`` table (its number
in the ``page`` column), in the same bytes, so existing data directories open as they are.

A bucket's bytes: ``[version u8][count u32]``, ``count`` name lengths and ``count`` state
lengths (u32 each), then the names (UTF-8) and the encoded states, each run back to back.
Integers are little-endian.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array

#: Buckets per cursor: a small subscription gets a bucket per virtual cursor, 100K ~100 per bucket.
BUCKETS = 1024
_HEAD = struct.Struct("<BI")
_VERSION = 1
_SWAP = sys.byteorder != "little"


def bucket_of(name: str) -> int:
    """The bucket the virtual cursor named ``name`` is kept in."""
    return zlib.crc32(name.encode()) & (BUCKETS - 1)


def _u32s(values: list[int]) -> bytes:
    numbers = array("I", values)
    if _SWAP:
        numbers.byteswap()
    return numbers.tobytes()


class Bucket:
    """One bucket's virtual cursors, ``name -> encoded state``, with its names' part of the bytes
    kept: most flushes change only the states of names already there, so the names (the larger
    part) are encoded again only when a name comes or goes."""

    __slots__ = ("_names", "states")

    def __init__(self, states: dict[str, bytes] | None = None) -> None:
        self.states: dict[str, bytes] = states if states is not None else {}
        #: The name lengths and the names, as bytes, for the names in ``states`` now (None: to make).
        self._names: tuple[bytes, bytes] | None = None

    def __len__(self) -> int:
        return len(self.states)

    def put(self, name: str, state: bytes) -> None:
        states = self.states
        if name not in states:
            self._names = None
        states[name] = state

    def remove(self, name: str) -> bool:
        """Whether ``name`` was there."""
        if self.states.pop(name, None) is None:
            return False
        self._names = None
        return True

    def encode(self) -> bytes:
        names = self._names
        if names is None:
            encoded = [name.encode() for name in self.states]
            names = self._names = (_u32s([len(n) for n in encoded]), b"".join(encoded))
        states = list(self.states.values())
        return b"".join(
            (_HEAD.pack(_VERSION, len(states)), names[0], _u32s([len(s) for s in states]), names[1], *states)
        )


def encode_bucket(states: dict[str, bytes]) -> bytes:
    """A bucket from ``name -> encoded state``."""
    return Bucket(dict(states)).encode()


def decode_bucket(data: bytes) -> dict[str, bytes]:
    """The inverse of ``encode_bucket``; raises ValueError on anything malformed."""
    if len(data) < _HEAD.size:
        raise ValueError("bucket too short")
    version, count = _HEAD.unpack_from(data)
    if version != _VERSION:
        raise ValueError(f"unknown bucket version {version}")
    offset = _HEAD.size
    end = offset + 8 * count
    if end > len(data):
        raise ValueError("bucket truncated in its lengths")
    lengths = array("I")
    lengths.frombytes(data[offset:end])
    if _SWAP:
        lengths.byteswap()
    if end + sum(lengths) != len(data):
        raise ValueError("bucket lengths do not add up to its size")
    offset = end
    names = []
    for size in lengths[:count]:
        names.append(data[offset : offset + size].decode())
        offset += size
    states = {}
    for name, size in zip(names, lengths[count:], strict=True):
        states[name] = data[offset : offset + size]
        offset += size
    if len(states) != count:
        raise ValueError("a name appears twice in a bucket")
    return states
