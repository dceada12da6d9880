"""Places stored in pages: one row holds many places, so a flush writes pages, not places.

100K broadcast consumers acknowledging every second would otherwise mean 100K row upserts a
second (~1.7 µs each in SQLite, measured: ``bench/places.py``). A place belongs to one of
``PAGES`` pages by a hash of its name, fixed for good, so no table of assignments is kept
and a place never moves; a flush rewrites each page that holds a changed place, whole.

A page's bytes: ``[version u8][count u32]``, ``count`` name lengths and ``count`` place
lengths (u32 each), then the names (UTF-8) and the encoded places, each run back to back.
Integers are little-endian.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array

#: Pages per cursor: small subscriptions get a page per place, 100K places ~100 per page.
PAGES = 1024
_HEAD = struct.Struct("<BI")
_VERSION = 1
_SWAP = sys.byteorder != "little"


def page_of(name: str) -> int:
    """The page a place named ``name`` is kept in."""
    return zlib.crc32(name.encode()) & (PAGES - 1)


def _u32s(values: list[int]) -> bytes:
    numbers = array("I", values)
    if _SWAP:
        numbers.byteswap()
    return numbers.tobytes()


class Page:
    """One page's places, ``name -> encoded place``, with its names' part of the bytes kept:
    most flushes change only the places of names already there, so the names (the larger
    part) are encoded again only when a name comes or goes."""

    __slots__ = ("_names", "places")

    def __init__(self, places: dict[str, bytes] | None = None) -> None:
        self.places: dict[str, bytes] = places if places is not None else {}
        #: The name lengths and the names, as bytes, for the names in ``places`` now (None: to make).
        self._names: tuple[bytes, bytes] | None = None

    def __len__(self) -> int:
        return len(self.places)

    def put(self, name: str, place: bytes) -> None:
        places = self.places
        if name not in places:
            self._names = None
        places[name] = place

    def remove(self, name: str) -> bool:
        """Whether ``name`` was there."""
        if self.places.pop(name, None) is None:
            return False
        self._names = None
        return True

    def encode(self) -> bytes:
        names = self._names
        if names is None:
            encoded = [name.encode() for name in self.places]
            names = self._names = (_u32s([len(n) for n in encoded]), b"".join(encoded))
        states = list(self.places.values())
        return b"".join(
            (_HEAD.pack(_VERSION, len(states)), names[0], _u32s([len(s) for s in states]), names[1], *states)
        )


def encode_page(places: dict[str, bytes]) -> bytes:
    """A page from ``name -> encoded place``."""
    return Page(dict(places)).encode()


def decode_page(data: bytes) -> dict[str, bytes]:
    """The inverse of ``encode_page``; raises ValueError on anything malformed."""
    if len(data) < _HEAD.size:
        raise ValueError("page too short")
    version, count = _HEAD.unpack_from(data)
    if version != _VERSION:
        raise ValueError(f"unknown page version {version}")
    offset = _HEAD.size
    end = offset + 8 * count
    if end > len(data):
        raise ValueError("page truncated in its lengths")
    lengths = array("I")
    lengths.frombytes(data[offset:end])
    if _SWAP:
        lengths.byteswap()
    if end + sum(lengths) != len(data):
        raise ValueError("page lengths do not add up to its size")
    offset = end
    names = []
    for size in lengths[:count]:
        names.append(data[offset : offset + size].decode())
        offset += size
    places = {}
    for name, size in zip(names, lengths[count:], strict=True):
        places[name] = data[offset : offset + size]
        offset += size
    if len(places) != count:
        raise ValueError("a name appears twice in a page")
    return places
