"""What a managed ledger knows about damage in its files: entries it skips and tails recovery cut.

Kept per managed ledger for the log, ``/metrics`` and internalStats, and across restarts: the
counts, the damaged entries already reported (up to ``MAX_KEPT_ENTRIES``) and the recent places
are a managed-ledger property (``PROPERTY``), written when something new is found, so a restart
neither starts the counts again nor reports the same entry a second time. Each damaged entry is
logged once; the list of places is bounded.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from magnetar.storage.errors import StorageError

log = logging.getLogger(__name__)

#: The places kept for internalStats; the counts go on past it.
MAX_RECENT = 100
#: The managed-ledger property that keeps the damage across restarts.
PROPERTY = "magnetar.damage"
#: Damaged entries remembered across restarts as already reported (the counts go on past it).
MAX_KEPT_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class Damage:
    """One damaged place in a ledger's log.

    ``entry_id`` is the entry that cannot be read, or None for a tail that recovery
    cut off the log (a torn last write, or damage no intact record follows):
    ``entries`` then counts the entries the index had for it (0 when only the log knew
    of them), and ``saved_to`` is where its bytes were kept, None when they were zeros.
    """

    ledger_id: int
    entry_id: int | None
    offset: int
    size: int
    entries: int = 1
    saved_to: str | None = None

    @property
    def kind(self) -> str:
        return "entry" if self.entry_id is not None else "tail"

    def describe(self) -> str:
        if self.entry_id is not None:
            return (
                f"entry {self.ledger_id}:{self.entry_id} is damaged ({self.size} bytes at offset"
                f" {self.offset} of ledger {self.ledger_id}'s log); it is skipped"
            )
        if self.saved_to:
            kept = f"kept in {self.saved_to}"
        else:
            kept = "all zeros, nothing to keep" if self.size else "the file ends there"
        return (
            f"ledger {self.ledger_id}: cut {self.size} bytes off its log at offset {self.offset}"
            f" (a torn or damaged tail; {self.entries} indexed entries in it); {kept}"
        )

    @classmethod
    def from_json(cls, doc: dict[str, object]) -> Damage:
        entry = doc["entryId"]
        saved = doc["savedTo"]
        return cls(
            int(str(doc["ledgerId"])),
            None if entry is None else int(str(entry)),
            int(str(doc["offset"])),
            int(str(doc["size"])),
            int(str(doc["entries"])),
            None if saved is None else str(saved),
        )

    def as_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "ledgerId": self.ledger_id,
            "entryId": self.entry_id,
            "offset": self.offset,
            "size": self.size,
            "entries": self.entries,
            "savedTo": self.saved_to,
        }


class DamageLog:
    """The damage one managed ledger found; ``keep(PROPERTY, to_json())`` stores it when it grows."""

    def __init__(self, keep: Callable[[str, str], None] | None = None) -> None:
        self._keep = keep
        self._keep_failed = False
        # Made at the first damage: every managed ledger has a log, and nearly all stay empty
        # (an empty set and deque are about 1 KiB, per loaded topic: issue 40).
        self._entries: set[tuple[int, int]] | None = None
        self._recent: deque[Damage] | None = None
        self.damaged_entries = 0
        self.dropped_tails = 0
        self.dropped_entries = 0  # indexed entries in the tails cut
        self.damaged_bytes = 0

    @property
    def recent(self) -> Sequence[Damage]:
        """The last ``MAX_RECENT`` places found, oldest first."""
        return () if self._recent is None else self._recent

    def _remember(self, places: Iterable[Damage]) -> None:
        if self._recent is None:
            self._recent = deque(maxlen=MAX_RECENT)
        self._recent.extend(places)

    def add(self, damage: Damage) -> bool:
        """Count ``damage``; False when it is an entry already known (log it once only)."""
        if damage.entry_id is not None:
            key = (damage.ledger_id, damage.entry_id)
            if self._entries is None:
                self._entries = set()
            if key in self._entries:
                return False
            self._entries.add(key)
            self.damaged_entries += 1
        else:
            self.dropped_tails += 1
            self.dropped_entries += damage.entries
        self.damaged_bytes += damage.size
        self._remember((damage,))
        return True

    def note(self, owner: str, places: Iterable[Damage]) -> None:
        """Count and log (once each) damage found in ``owner``'s files; a run of damaged entries
        in one ledger is one log line. What is new is kept (``keep``)."""
        run: list[Damage] = []
        next_entry = -1  # the entry that would continue the run
        new = False
        for place in places:
            if not self.add(place):
                continue
            new = True
            if place.entry_id is None:
                log.warning("%s: %s", owner, place.describe())
                continue
            if run and (run[-1].ledger_id, next_entry) != (place.ledger_id, place.entry_id):
                _log_run(owner, run)
                run = []
            run.append(place)
            next_entry = place.entry_id + 1
        if run:
            _log_run(owner, run)
        if new:
            self._store(owner)

    def _store(self, owner: str) -> None:
        if self._keep is None:
            return
        try:
            self._keep(PROPERTY, self.to_json())
            self._keep_failed = False
        except StorageError as exc:  # a full disk: kept in memory, tried again with the next damage
            if not self._keep_failed:
                log.warning("%s: the damage found could not be stored (%s); it is kept in memory", owner, exc)
            self._keep_failed = True

    def to_json(self) -> str:
        return json.dumps(
            {
                "damagedEntries": self.damaged_entries,
                "droppedTails": self.dropped_tails,
                "droppedEntries": self.dropped_entries,
                "damagedBytes": self.damaged_bytes,
                "entries": sorted(self._entries or ())[:MAX_KEPT_ENTRIES],
                "places": [d.as_json() for d in self.recent],
            }
        )

    def restore(self, owner: str, properties: Mapping[str, str]) -> None:
        """Take back what ``keep`` stored among a managed ledger's ``properties`` (nothing when
        there is none, or it cannot be read)."""
        text = properties.get(PROPERTY)
        if text is None:
            return
        try:
            kept = json.loads(text)
            self.damaged_entries = int(kept["damagedEntries"])
            self.dropped_tails = int(kept["droppedTails"])
            self.dropped_entries = int(kept["droppedEntries"])
            self.damaged_bytes = int(kept["damagedBytes"])
            self._entries = {(int(ledger), int(entry)) for ledger, entry in kept["entries"]}
            self._remember(Damage.from_json(place) for place in kept["places"])
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: the damage kept from before could not be read (%s); counting anew", owner, exc)

    def stats(self) -> dict[str, object]:
        return {
            "damagedEntries": self.damaged_entries,
            "droppedTails": self.dropped_tails,
            "droppedEntries": self.dropped_entries,
            "damagedBytes": self.damaged_bytes,
            "places": [d.as_json() for d in self.recent],
        }


def _log_run(owner: str, run: list[Damage]) -> None:
    if len(run) == 1:
        log.warning("%s: %s", owner, run[0].describe())
        return
    first, last = run[0], run[-1]
    log.warning(
        "%s: entries %d:%d..%d:%d are damaged (%d bytes from offset %d of ledger %d's log); they are skipped",
        owner,
        first.ledger_id,
        first.entry_id,
        last.ledger_id,
        last.entry_id,
        sum(place.size for place in run),
        first.offset,
        first.ledger_id,
    )
