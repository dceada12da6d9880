"""A cursor's whole state in one value, and the earlier stored form: one JSON metadata row.

Schema 1 stored each durable cursor as JSON in its metadata row: the
mark-delete position, the individually deleted ranges as ``[ledger, start, end)``
triples and the batch ack sets as signed words. Cursors now live in cursor
ledgers (PIP 81, ``cursor_store.py``); a row still in this form is read and
migrated when its managed ledger opens. ``CursorState`` is also how a cursor is
given its starting position.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from magnetar.storage.position import Position


@dataclass(frozen=True, slots=True)
class CursorState:
    mark_delete: Position
    individually_deleted: list[tuple[int, int, int]] = field(default_factory=list)
    batch_acks: list[tuple[Position, list[int]]] = field(default_factory=list)

    def ranges_json(self) -> str:
        return json.dumps([list(t) for t in self.individually_deleted], separators=(",", ":"))

    def batch_json(self) -> str:
        rows = [[p.ledger_id, p.entry_id, words] for p, words in self.batch_acks]
        return json.dumps(rows, separators=(",", ":"))

    @classmethod
    def from_columns(cls, ledger_id: int, entry_id: int, ranges_json: str, batch_json: str) -> CursorState:
        ranges = [(int(lid), int(s), int(e)) for lid, s, e in json.loads(ranges_json or "[]")]
        batch = [
            (Position(int(lid), int(eid)), [int(w) for w in words])
            for lid, eid, words in json.loads(batch_json or "[]")
        ]
        return cls(Position(ledger_id, entry_id), ranges, batch)
