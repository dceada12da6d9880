"""Finding offloaded ledgers again from the object store alone (``magnetar repair`` after the
metadata store was lost: it is the only record of which object holds which ledger).

An object's key names its managed ledger's directory and its ledger (``offloader.object_key``:
``<directory, % as ~>/<ledger id, 20 digits>-<attempt>.ledger``), and the object is
self-describing: the ledger's log, records as on disk, then its index, one little-endian u64
offset per entry. So the last 8 bytes give the last entry's offset, its record header the end of
the log, and the rest the entry count; then the whole object is read once: every record must pass
its CRC32C and sit where the index says, and the CRC32C of all the bytes is what the metadata
records. An object that does not read back so (an attempt given up half-way cannot be one, as
uploads are atomic, but a damaged object can) is reported, never recorded.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from datetime import datetime

import crc32c
import obstore

from magnetar.offload.object_io import CHUNK, ObjectIO
from magnetar.storage.ledger_info import OFFLOADED, LedgerInfo, Offload
from magnetar.storage.record import HEADER, HEADER_SIZE, checksum
from magnetar.storage.repair import StoreLedgers

_KEY = re.compile(r"^(?P<directory>[^/]+)/(?P<ledger>\d{20})-[0-9a-f]+\.ledger$")
_OFFSET = struct.Struct("<Q")


class UnreadableObject(Exception):
    """An object that is not a whole offloaded ledger."""


class StoreRecovery:
    """storage's ``ObjectStoreLedgers`` over one store (what ``magnetar repair`` is given)."""

    def __init__(self, io: ObjectIO) -> None:
        self.io = io

    def directories(self) -> list[str]:
        return directories(self.io)

    def find(self, directory: str) -> StoreLedgers:
        return find_ledgers(self.io, directory)


def key_directory(directory: str) -> str:
    """The key prefix of a managed-ledger directory's objects (``%``, which keys handle badly, as ``~``)."""
    return directory.replace("%", "~")


def directories(io: ObjectIO) -> list[str]:
    """The managed-ledger directories the store holds objects of (their names on disk)."""
    listed = obstore.list_with_delimiter(io.store)
    return sorted(prefix.rstrip("/").replace("~", "%") for prefix in listed["common_prefixes"])


def find_ledgers(io: ObjectIO, directory: str) -> StoreLedgers:
    """Every offloaded ledger of ``directory`` the store holds whole, oldest first."""
    found = StoreLedgers()
    by_ledger: dict[int, LedgerInfo] = {}
    objects = sorted(_objects(io, key_directory(directory)), key=lambda o: o[2], reverse=True)
    for key, size, modified in objects:  # the newest attempt of a ledger first
        match = _KEY.match(key)
        if match is None:
            continue  # not an offloaded ledger (a store's staging file ...)
        ledger_id = int(match.group("ledger"))
        try:
            info = read_ledger(io, key, ledger_id, size, modified.timestamp())
        except (UnreadableObject, OSError) as exc:
            found.unreadable.append((key, str(exc)))
            continue
        if ledger_id in by_ledger:
            found.duplicates.append(key)
        else:
            by_ledger[ledger_id] = info
    found.ledgers = [by_ledger[ledger_id] for ledger_id in sorted(by_ledger)]
    return found


def _objects(io: ObjectIO, prefix: str) -> Iterator[tuple[str, int, datetime]]:
    for batch in obstore.list(io.store, prefix=prefix + "/"):
        for meta in batch:
            yield meta["path"], int(meta["size"]), meta["last_modified"]


def read_ledger(io: ObjectIO, key: str, ledger_id: int, size: int, modified: float) -> LedgerInfo:
    """The ledger the object ``key`` holds, every record checked (UnreadableObject if it does not)."""
    if size < _OFFSET.size + HEADER_SIZE:
        raise UnreadableObject(f"{key}: {size} bytes is too short for a ledger")
    (last,) = _OFFSET.unpack(io.read_range(key, size - _OFFSET.size, size))
    if last + HEADER_SIZE > size:
        raise UnreadableObject(f"{key}: its index points past the object")
    length, _ = HEADER.unpack(io.read_range(key, last, last + HEADER_SIZE))
    log_size = last + HEADER_SIZE + length
    entries, rest = divmod(size - log_size, _OFFSET.size)
    if rest or entries < 1 or log_size > size:
        raise UnreadableObject(f"{key}: its index does not fit its log")
    crc = _check(io, key, size, log_size, entries)
    offload = Offload(key, OFFLOADED, size, crc, modified, local_deleted=True)
    return LedgerInfo(ledger_id, entries, log_size, modified, True, modified, offload)


def _check(io: ObjectIO, key: str, size: int, log_size: int, entries: int) -> int:
    """Read the whole object once: each record against its CRC32C and the index; the object's CRC32C."""
    crc = 0
    pending = b""  # bytes not parsed yet: of the log, then the index
    base = 0  # the object offset of ``pending``'s first byte
    offsets: list[int] = []
    for start in range(0, size, CHUNK):
        chunk = io.read_range(key, start, min(size, start + CHUNK))
        crc = crc32c.crc32c(chunk, crc)
        pending += chunk
        at = 0
        while base + at < log_size and len(pending) - at >= HEADER_SIZE:
            length, record_crc = HEADER.unpack_from(pending, at)
            end = at + HEADER_SIZE + length
            if len(pending) < end:
                break
            if base + end > log_size or checksum(length, pending[at + HEADER_SIZE : end]) != record_crc:
                raise UnreadableObject(f"{key}: the record at {base + at} fails its checksum")
            offsets.append(base + at)
            at = end
        pending, base = pending[at:], base + at
    if base != log_size or len(pending) != entries * _OFFSET.size:
        raise UnreadableObject(f"{key}: its records do not end where its index begins")
    stored = [_OFFSET.unpack_from(pending, n * _OFFSET.size)[0] for n in range(entries)]
    if stored != offsets:
        raise UnreadableObject(f"{key}: its index does not match its {len(offsets)} records")
    return crc
