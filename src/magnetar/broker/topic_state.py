"""A persistent topic's durable state beside its entries: producer sequence ids, the newest index
and broker timestamp, recent chunks. The snapshot stored as a managed-ledger property, and the
replay of the entries stored after it when the topic opens."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.broker.message_deduplication import record_persisted, sequence_key
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.entry import EntryData
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

SEQUENCES_KEY = "producer_sequences"


@dataclass
class RecoveredState:
    """What ``recover`` rebuilt: the sequences, the newest stored metadata and the last position
    replayed; ``dirty`` when entries after the snapshot were replayed (the next flush records them)."""

    producer_sequences: dict[str, int] = field(default_factory=dict)
    stored: wire.BrokerEntryMetadata = field(default_factory=wire.BrokerEntryMetadata)
    last_published: Position = field(default_factory=lambda: Position(-1, -1))
    dirty: bool = False


def recover(ml: ManagedLedger, stored_chunks: StoredChunks, interceptors: Sequence) -> RecoveredState:
    """Rebuild producer sequence ids and the newest stored index and broker timestamp.

    The snapshot (written by ``snapshot``: periodically, before every trim and on close) holds
    them as of a position; the entries stored after it (at most a flush interval's worth after a
    kill -9, every entry when there is no snapshot) are replayed, so the index goes on after the
    last one stored: no gap, no repeat. Entries the replay finds make the state dirty, so the next
    flush records them before a trim can delete them. ``stored_chunks`` gets the recent chunks
    back; each interceptor with a ``recover`` is given the newest stored metadata.
    """
    state = RecoveredState()
    start = None
    raw = ml.get_property(SEQUENCES_KEY)
    if raw:
        saved = json.loads(raw)
        state.producer_sequences = {k: int(v) for k, v in saved["sequences"].items()}
        if saved.get("index") is not None:
            state.stored.index = int(saved["index"])
        if saved.get("broker_timestamp") is not None:
            state.stored.broker_timestamp = int(saved["broker_timestamp"])
        stored_chunks.restore(saved.get("chunks", []))
        start = ml.next_position(Position(*saved["position"]))
    if start is None:
        start = ml.first_position()
    last = ml.last_confirmed
    while start is not None and start.entry_id >= 0 and start <= last:
        entries = ml.read_entries(start, 1000)
        if not entries:
            break
        for entry in entries:
            _replay_entry(state, stored_chunks, entry.data, entry.position)
        state.last_published = entries[-1].position
        state.dirty = True
        start = ml.next_position(entries[-1].position)
    for interceptor in interceptors:
        recover_interceptor = getattr(interceptor, "recover", None)
        if recover_interceptor is not None:
            recover_interceptor(state.stored)
    return state


def _replay_entry(
    state: RecoveredState, stored_chunks: StoredChunks, data: EntryData, position: Position
) -> None:
    try:
        meta, producer_bytes = split_entry_metadata(data)
    except ProtocolError:
        return
    if meta is not None:
        keep_newest(state.stored, meta)
    try:
        metadata, _ = parse_metadata(producer_bytes)
    except ProtocolError:
        return
    chunk = chunk_ref(metadata)
    if chunk is not None:
        stored_chunks.recover(metadata, chunk, position)
    highest = max(metadata.sequence_id, metadata.highest_sequence_id)
    record_persisted(state.producer_sequences, sequence_key(metadata.producer_name, highest, metadata, chunk))


def snapshot(
    last_published: Position,
    producer_sequences: dict[str, int],
    stored: wire.BrokerEntryMetadata,
    stored_chunks: StoredChunks,
) -> str:
    """The snapshot ``recover`` reads: the state as of ``last_published``, as JSON."""
    saved: dict = {
        "position": [last_published.ledger_id, last_published.entry_id],
        "sequences": producer_sequences,
    }
    if stored.HasField("index"):
        saved["index"] = stored.index
    if stored.HasField("broker_timestamp"):
        saved["broker_timestamp"] = stored.broker_timestamp
    if stored_chunks.chunks:
        saved["chunks"] = stored_chunks.snapshot()
    return json.dumps(saved)


def keep_newest(stored: wire.BrokerEntryMetadata, meta: wire.BrokerEntryMetadata) -> None:
    """Record ``meta``'s index and broker timestamp in ``stored`` when they are newer."""
    if meta.HasField("index") and (not stored.HasField("index") or meta.index > stored.index):
        stored.index = meta.index
    if meta.HasField("broker_timestamp") and meta.broker_timestamp > stored.broker_timestamp:
        stored.broker_timestamp = meta.broker_timestamp
