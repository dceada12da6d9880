"""Which chunked messages each consumer of a topic may still hold part of in its client, by
subscription and consumer name, so that a consumer coming back (a reconnect, a broker restart)
gets them in a form its client assembles (``chunk_watch``).

Only consumers of clients that keep partial messages across reconnects are watched. A watched
consumer that leaves without closing (its connection lost, the broker stopping or closing it)
leaves a record; the next consumer of the same name on that subscription takes it. Records and
what the connected consumers hold now are kept as a managed-ledger property, written at each
flush where they changed: so they survive a graceful stop, and a kill -9 up to the last flush.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from magnetar.broker.chunk_watch import ChunkWatch
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.protocol import wire
from magnetar.protocol.chunks import ChunkRef
from magnetar.storage.errors import StorageError
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription

log = logging.getLogger(__name__)

KEY = "chunk_contexts"
#: (subscription, consumer name) records kept per topic; the oldest go first.
MAX_RECORDS = 1000
#: Messages kept per record (the C++ client keeps 10 partial messages by default).
MAX_PER_RECORD = 16

Key = tuple[str, str]


class ChunkContexts:
    def __init__(self, ml: ManagedLedger) -> None:
        self._ml = ml
        self._saved = ml.get_property(KEY)
        #: The records and the watched consumers are made at the first (two tables of 192 bytes
        #: for each topic otherwise, most never seeing a chunked message; issue 40).
        self._records: OrderedDict[Key, list[str]] | None = None
        if self._saved:
            try:
                for subscription, consumer, uuids in json.loads(self._saved):
                    self._table()[(subscription, consumer)] = list(uuids)
            except (ValueError, TypeError) as exc:
                log.warning("%s: unreadable %s property, ignored: %s", ml.name, KEY, exc)
        #: Watched consumers now: their (subscription, consumer name).
        self._live: dict[ChunkWatch, Key] | None = None

    def attach(
        self, consumer: Consumer, subscription: CursorSubscription[Consumer], chunks: StoredChunks
    ) -> None:
        """Watch ``consumer``, holding what a consumer of its name left recorded."""
        cursor, ml, recent = subscription.cursor, subscription.topic.ml, subscription.topic.recent_entries

        def read(position: Position) -> DispatchEntry | None:
            if cursor.is_acked(position):
                return None
            try:
                return recent.entry(ml.read_entry(position))
            except StorageError:
                return None

        def last_chunk(metadata: wire.MessageMetadata, chunk: ChunkRef) -> Position | None:
            return chunks.position(metadata, chunk, chunk.num_chunks - 1)

        key = (subscription.name, consumer.name)
        held = self._records.pop(key, ()) if self._records is not None else ()
        watch = ChunkWatch(read, last_chunk, self._left, held)
        if self._live is None:
            self._live = {}
        self._live[watch] = key
        consumer.chunk_watch = watch

    def _left(self, watch: ChunkWatch, keep: bool) -> None:
        key = self._live.pop(watch, None) if self._live is not None else None
        holding = watch.holding()
        if key is None or not keep or not holding:
            return
        records = self._table()
        merged = list(dict.fromkeys([*records.pop(key, ()), *holding]))
        records[key] = merged[-MAX_PER_RECORD:]
        while len(records) > MAX_RECORDS:
            records.popitem(last=False)

    def _table(self) -> OrderedDict[Key, list[str]]:
        if self._records is None:
            self._records = OrderedDict()
        return self._records

    def records(self) -> dict[Key, list[str]]:
        """What is recorded and what the watched consumers hold now (as a restart would find it)."""
        out = {key: list(uuids) for key, uuids in (self._records or {}).items()}
        for watch, key in (self._live or {}).items():
            if holding := watch.holding():
                out[key] = list(dict.fromkeys([*out.get(key, ()), *holding]))[-MAX_PER_RECORD:]
        return out

    def save(self) -> None:
        """Write ``records`` where they changed since the last write (a topic flush)."""
        records = self.records()
        text = json.dumps([[*key, uuids] for key, uuids in records.items()]) if records else None
        if text == self._saved:
            return
        if text is None:
            self._ml.delete_property(KEY)
        else:
            self._ml.set_property(KEY, text)
        self._saved = text
