"""Reading a segment log past damage: find records again after a bad one, keep damaged bytes aside.

The read path trusts the index and checks every record's crc32c; only when a check
fails does it come here, so intact data pays nothing for this. A damaged record
costs only itself: its neighbours are found by the index (each entry's record
spans from its offset to the next one), or, where the index does not reach, by
*resynchronising*: looking for the next offset where an intact record starts that
is followed by another intact record, the end of the file or zeros.

Nothing is deleted. Bytes that recovery cuts off the end of a log (a torn or
damaged tail) are first written to ``<segment>.log.damaged-<offset>`` next to it.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from magnetar.storage.record import HEADER, HEADER_SIZE, checksum, read_header, record_end_at, scan_records

log = logging.getLogger(__name__)

#: Bytes read at a time while looking for the next intact record.
_RESYNC_CHUNK = 1 << 20
DAMAGED_SUFFIX = ".damaged-"
_ZERO_HEADER = bytes(HEADER_SIZE)
_NON_ZERO = re.compile(rb"[^\x00]")


@dataclass(slots=True)
class LogScan:
    """What a forward scan of a log found: record offsets (a damaged region counts as one entry)."""

    offsets: list[int] = field(default_factory=list)
    end: int = 0  # where the last intact record ends
    #: (index in ``offsets``, offset, end) of each damaged region
    damaged: list[tuple[int, int, int]] = field(default_factory=list)


def scan_log(fd: int, start: int, file_size: int) -> LogScan:
    """Scan records from ``start``; past a bad record, resynchronise instead of stopping.

    A damaged region followed by intact records becomes one entry (its offset in
    ``offsets``, its span in ``damaged``), so the records after it keep their
    entry ids when one record was damaged. What follows the last intact record
    (a torn tail, zeros) is not an entry; ``end`` says where it starts.
    """
    scan = LogScan(end=start)
    pos = start
    while True:
        for offset, end in scan_records(fd, pos, file_size):
            scan.offsets.append(offset)
            scan.end = end
        bad = scan.end
        following = find_next_record(fd, bad, file_size)
        if following is None:
            return scan
        scan.damaged.append((len(scan.offsets), bad, following))
        scan.offsets.append(bad)
        scan.end = pos = following


def find_next_record(fd: int, bad: int, file_size: int) -> int | None:
    """The offset of the first intact record after the bad one at ``bad`` that is followed by an
    intact record, the end of the file or zeros; None when there is none (a torn tail).

    The bad record's own length is tried first (only its data or checksum was hit);
    then every offset, skipping runs of zeros at C speed.
    """
    if bad + HEADER_SIZE <= file_size:
        (length, _) = read_header(fd, bad)
        candidate = bad + HEADER_SIZE + length
        if candidate < file_size and _starts_chain(fd, candidate, file_size):
            return candidate
    pos = bad + HEADER_SIZE
    while pos + HEADER_SIZE <= file_size:
        buf = os.pread(fd, min(_RESYNC_CHUNK, file_size - pos), pos)
        view = memoryview(buf)
        # A length (big-endian) that fits in the rest of the file starts with a small byte: only
        # offsets holding one are looked at, found at C speed (most of random data is passed over).
        possible = re.compile(rb"[\x00-" + re.escape(bytes([min(255, (file_size - pos) >> 24)])) + rb"]")
        rel = 0
        limit = len(buf) - HEADER_SIZE
        while (found := possible.search(buf, rel, limit + 1)) is not None:
            rel = found.start()
            if buf[rel] == 0 and buf[rel : rel + HEADER_SIZE] == _ZERO_HEADER:
                # A header of zeros is never intact: go to the first header with a non-zero byte.
                nonzero = _NON_ZERO.search(buf, rel)
                rel = limit + 1 if nonzero is None else max(rel + 1, nonzero.start() - HEADER_SIZE + 1)
                continue
            length, crc = HEADER.unpack_from(view, rel)
            end = pos + rel + HEADER_SIZE + length
            if end <= file_size:
                if rel + HEADER_SIZE + length <= len(buf):
                    intact = checksum(length, view[rel + HEADER_SIZE : rel + HEADER_SIZE + length]) == crc
                else:
                    intact = record_end_at(fd, pos + rel, file_size) is not None
                if intact and _followed_well(fd, end, file_size):
                    return pos + rel
            rel += 1
        pos += max(limit + 1, 1)
    return None


def _starts_chain(fd: int, offset: int, file_size: int) -> bool:
    end = record_end_at(fd, offset, file_size)
    return end is not None and _followed_well(fd, end, file_size)


def _followed_well(fd: int, end: int, file_size: int) -> bool:
    """After a candidate record: the end of the file, zeros, or another intact record."""
    if end + HEADER_SIZE > file_size:
        return all_zero(os.pread(fd, file_size - end, end))
    head = os.pread(fd, HEADER_SIZE, end)
    return head == _ZERO_HEADER or record_end_at(fd, end, file_size) is not None


def all_zero(data: bytes) -> bool:
    return _NON_ZERO.search(data) is None


def parse_span(buf: bytes, starts: list[int]) -> list[memoryview | None]:
    """Split ``buf`` into records by ``starts`` (offsets relative to ``buf``, the last record ending
    at its end); a record whose length or checksum does not match its span is None."""
    view = memoryview(buf)
    out: list[memoryview | None] = []
    bounds = [*starts, len(buf)]
    for begin, end in pairwise(bounds):
        if end - begin < HEADER_SIZE:
            out.append(None)
            continue
        length, crc = HEADER.unpack_from(view, begin)
        data = view[begin + HEADER_SIZE : end]
        out.append(data if length == len(data) and checksum(length, data) == crc else None)
    return out


def save_aside(log_path: Path, offset: int, data: bytes) -> Path:
    """Write damaged bytes to ``<log>.damaged-<offset>`` next to the log, durably, before they are cut."""
    path = log_path.with_name(f"{log_path.name}{DAMAGED_SUFFIX}{offset}")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path
