"""What the producer puts in each message, and what a consumer reads back from a MESSAGE frame.

The payload starts with ``STAMP``: the send time (ns) and the sequence number. The times the
latencies are taken from are the broker's: the broker timestamp of the entry metadata (PIP 70,
set when the entry is stored) and the producer's publish time (its metadata). Both are parsed
once per entry per worker (``EntryCache``), not once per consumer.
"""

from __future__ import annotations

import struct
import time
from typing import NamedTuple

from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata

STAMP = struct.Struct(">qi")  # send time (ns), sequence number
CACHE_LIMIT = 256  # entries remembered per worker; consumers are at most a few entries apart


def payload(seq: int, size: int) -> bytes:
    """Message ``seq`` of ``size`` bytes (at least the stamp)."""
    return STAMP.pack(time.time_ns(), seq) + b"x" * max(0, size - STAMP.size)


class EntryTimes(NamedTuple):
    broker_ms: int  # 0 when the broker sent no broker timestamp
    publish_ms: int
    seq: int


def read_entry(headers_and_payload: memoryview) -> EntryTimes:
    """Broker timestamp, publish time and sequence number of one MESSAGE frame's bytes."""
    broker_meta, rest = split_entry_metadata(headers_and_payload)
    metadata, body = parse_metadata(rest)
    broker_ms = broker_meta.broker_timestamp if broker_meta is not None else 0
    return EntryTimes(broker_ms, metadata.publish_time, STAMP.unpack_from(body)[1])


class EntryCache:
    """Each entry's times, keyed by (ledger, entry): a worker's consumers all get the same entries."""

    __slots__ = ("_times",)

    def __init__(self) -> None:
        self._times: dict[tuple[int, int], EntryTimes] = {}

    def get(self, ledger_id: int, entry_id: int, headers_and_payload: memoryview) -> EntryTimes:
        key = (ledger_id, entry_id)
        times = self._times.get(key)
        if times is None:
            if len(self._times) >= CACHE_LIMIT:
                self._times.clear()
            times = self._times[key] = read_entry(headers_and_payload)
        return times
