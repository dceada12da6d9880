"""Chunked messages at scale: each consumer checks that every message arrives whole.

A message larger than the broker's ``max_message_size`` goes out as several entries (chunks),
each with the message's ``uuid``, its ``chunk_id``, ``num_chunks_from_msg`` and the message's
``total_chunk_msg_size``. A lean consumer keeps no payload: per consumer only the chunk it
expects next, the bytes seen so far and the uuid of the message being received, so a message
counts (once, in the tally) only when its chunks came complete, in order, and add up to its size.
Only the first chunk starts with the stamp, so the sequence number is remembered per uuid.
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from bench.lean.stamp import CACHE_LIMIT, STAMP
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata


class ChunkEntry(NamedTuple):
    broker_ms: int  # 0 when the broker sent no broker timestamp
    publish_ms: int
    seq: int  # the message's sequence number; -1 when its first chunk was not seen by this worker
    uuid: str  # "" for a message that was not chunked
    chunk_id: int
    num_chunks: int
    total_size: int  # the whole message's bytes
    size: int  # this chunk's bytes


class ChunkCache:
    """Each entry's chunk fields, parsed once per worker; uuid -> sequence number from first chunks."""

    __slots__ = ("_entries", "_seqs")

    def __init__(self) -> None:
        self._entries: dict[tuple[int, int], ChunkEntry] = {}
        self._seqs: dict[str, int] = {}

    def get(self, ledger_id: int, entry_id: int, headers_and_payload: memoryview) -> ChunkEntry:
        key = (ledger_id, entry_id)
        entry = self._entries.get(key)
        if entry is None:
            if len(self._entries) >= CACHE_LIMIT:
                self._entries.clear()
            entry = self._entries[key] = self._read(headers_and_payload)
        return entry

    def _read(self, headers_and_payload: memoryview) -> ChunkEntry:
        broker_meta, rest = split_entry_metadata(headers_and_payload)
        meta, body = parse_metadata(rest)
        broker_ms = broker_meta.broker_timestamp if broker_meta is not None else 0
        if not meta.HasField("chunk_id"):
            seq = STAMP.unpack_from(body)[1]
            return ChunkEntry(broker_ms, meta.publish_time, seq, "", 0, 1, len(body), len(body))
        if meta.chunk_id == 0:
            if len(self._seqs) >= CACHE_LIMIT:
                self._seqs.clear()
            self._seqs[meta.uuid] = STAMP.unpack_from(body)[1]
        seq = self._seqs.get(meta.uuid, -1)
        return ChunkEntry(
            broker_ms,
            meta.publish_time,
            seq,
            meta.uuid,
            meta.chunk_id,
            meta.num_chunks_from_msg,
            meta.total_chunk_msg_size,
            len(body),
        )


class ChunkCheck:
    """Per consumer: the chunk expected next, the bytes so far and the uuid being received."""

    __slots__ = ("abandoned", "chunks", "next_chunk", "out_of_place", "so_far", "uuids", "wrong_size")

    def __init__(self, size: int) -> None:
        self.next_chunk = array("i", bytes(4 * size))
        self.so_far = array("q", bytes(8 * size))
        self.uuids: list[str | None] = [None] * size
        self.chunks = 0
        self.abandoned = 0  # messages left incomplete when a new one began
        self.out_of_place = 0  # chunks not the next one of the message being received
        self.wrong_size = 0  # messages whose chunks did not add up to their size

    def take(self, index: int, chunk: ChunkEntry) -> bool:
        """Count one chunk; True when it completes a whole message (then it counts in the tally)."""
        self.chunks += 1
        if chunk.chunk_id == 0:
            if self.next_chunk[index]:
                self.abandoned += 1
            self.uuids[index] = chunk.uuid
            self.next_chunk[index] = 1
            self.so_far[index] = chunk.size
        elif chunk.uuid != self.uuids[index] or chunk.chunk_id != self.next_chunk[index]:
            self.out_of_place += 1
            self.next_chunk[index] = 0
            self.uuids[index] = None
            return False
        else:
            self.next_chunk[index] += 1
            self.so_far[index] += chunk.size
        if self.next_chunk[index] < chunk.num_chunks:
            return False
        whole = self.so_far[index] == chunk.total_size and chunk.seq >= 0
        self.next_chunk[index] = 0
        self.uuids[index] = None
        if not whole:
            self.wrong_size += 1
        return whole

    def summary(self) -> dict[str, int]:
        return {
            "chunks": self.chunks,
            "abandoned": self.abandoned,
            "out_of_place": self.out_of_place,
            "wrong_size": self.wrong_size,
        }
