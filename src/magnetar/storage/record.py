"""The segment log's record format: ``[u32 length][u32 crc32c][data]``, big-endian.

The checksum covers the length field and the data. Covering the length means a
run of zero bytes (what a torn, pre-allocated tail often reads as) is never a
valid empty record: crc32c of four zero bytes is not zero.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import crc32c

HEADER = struct.Struct(">II")
HEADER_SIZE = HEADER.size
MAX_RECORD_DATA = 0xFFFF_FFFF
_LENGTH = struct.Struct(">I")
_SCAN_CHUNK = 1 << 20


def checksum(length: int, data: bytes | memoryview) -> int:
    return crc32c.crc32c(data, crc32c.crc32c(_LENGTH.pack(length)))


def encode_header(data: bytes | memoryview) -> bytes:
    if len(data) > MAX_RECORD_DATA:
        raise ValueError(f"entry of {len(data)} bytes is over the {MAX_RECORD_DATA} byte limit")
    return HEADER.pack(len(data), checksum(len(data), data))


def parse_records(buf: bytes, count: int) -> list[memoryview]:
    """Split ``count`` consecutive records out of ``buf``, verifying each checksum.

    The records are read-only views of ``buf``, not copies: a dispatcher sends them to the
    socket as they are, and the read's buffer lives as long as any of them.
    """
    view = memoryview(buf)
    out = []
    pos = 0
    for _ in range(count):
        if pos + HEADER_SIZE > len(view):
            raise ValueError("record header runs past the bytes read")
        length, crc = HEADER.unpack_from(view, pos)
        start = pos + HEADER_SIZE
        data = view[start : start + length]
        if len(data) != length:
            raise ValueError("record data runs past the bytes read")
        if checksum(length, data) != crc:
            raise ValueError("record checksum mismatch")
        out.append(data)
        pos = start + length
    return out


def read_header(fd: int, offset: int) -> tuple[int, int]:
    """``(length, crc)`` from the header of the record at ``offset``."""
    length, crc = HEADER.unpack(os.pread(fd, HEADER_SIZE, offset))
    return length, crc


def record_end_at(fd: int, offset: int, file_size: int) -> int | None:
    """End offset of the intact record starting at ``offset``, or None if it is torn or corrupt."""
    if offset < 0 or offset + HEADER_SIZE > file_size:
        return None
    length, crc = read_header(fd, offset)
    end = offset + HEADER_SIZE + length
    if end > file_size:
        return None
    data = os.pread(fd, length, offset + HEADER_SIZE)
    if len(data) != length or checksum(length, data) != crc:
        return None
    return end


def scan_records(fd: int, start: int, file_size: int) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, end)`` of each intact record from ``start``; stop at the first bad one.

    Reads in large chunks, so rebuilding an index costs about one pass over the file.
    """
    pos = start
    while pos + HEADER_SIZE <= file_size:
        buf = os.pread(fd, min(_SCAN_CHUNK, file_size - pos), pos)
        view = memoryview(buf)
        rel = 0
        while rel + HEADER_SIZE <= len(view):
            length, crc = HEADER.unpack_from(view, rel)
            end = rel + HEADER_SIZE + length
            if end > len(view):
                break
            if checksum(length, view[rel + HEADER_SIZE : end]) != crc:
                return
            yield pos + rel, pos + end
            rel = end
        if rel == 0:
            # One record larger than the chunk: check it on its own.
            end_abs = record_end_at(fd, pos, file_size)
            if end_abs is None:
                return
            yield pos, end_abs
            rel = end_abs - pos
        pos += rel
