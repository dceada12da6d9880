"""A replicator's durable state, a property of the topic's managed ledger
(``replicator.{remote}``): its epoch and the entries the remote refused.

Why it is needed: the remote deduplicates by sequence id, so once it has stored an entry it
drops a lower sequence id from the same source (and producer). If it refused entry k (a send
error) but stored k+1, sending k again with its own sequence id would be taken for a duplicate
and lost, as apache/pulsar#26113 loses it. So a refused entry is remembered, across restarts
too; when the remote answers "duplicate" to a refused entry the replicator moves to the next
epoch, which puts every sequence id from then on above all earlier ones (entry_copy.EPOCH_SHIFT),
and sends it again. Such an entry arrives after those the remote took past it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position


def _key(remote: str) -> str:
    return f"replicator.{remote}"


@dataclass
class ReplicatorState:
    epoch: int = 0
    refused: set[Position] = field(default_factory=set)

    @classmethod
    def load(cls, ml: ManagedLedger, remote: str) -> ReplicatorState:
        raw = ml.get_property(_key(remote))
        if raw is None:
            return cls()
        value = json.loads(raw)
        return cls(value["epoch"], {Position(ledger, entry) for ledger, entry in value["refused"]})

    def save(self, ml: ManagedLedger, remote: str) -> None:
        refused = sorted([p.ledger_id, p.entry_id] for p in self.refused)
        ml.set_property(_key(remote), json.dumps({"epoch": self.epoch, "refused": refused}))

    @staticmethod
    def delete(ml: ManagedLedger, remote: str) -> None:
        if ml.get_property(_key(remote)) is not None:
            ml.delete_property(_key(remote))
