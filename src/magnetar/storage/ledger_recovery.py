"""A managed ledger's ledgers as it opens: the list rebuilt from the metadata store, the open
ledger's tail checked (a torn record cut off), and segment files no ledger owns accounted for."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from magnetar.storage.damage import Damage
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.ledger_list import LedgerList
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.orphans import move_aside
from magnetar.storage.segment import Segment
from magnetar.storage.syncer import Syncer

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|idx)$")


def recover_ledgers(
    metadata: MetadataStore,
    ml_id: int,
    directory: Path,
    preallocate: int,
    syncer: Syncer,
    note_damage: Callable[[Iterable[Damage]], None],
) -> tuple[dict[int, LedgerInfo], LedgerList, Segment]:
    """The ledgers' infos, the ledger list, and the open ledger's segment (appended to next).

    Closed ledgers' entry counts come from the metadata store. The open ledger, which is
    always the last, is recovered from its files and stays the one appended to, so restarts
    do not pile up ledgers.
    """
    infos: dict[int, LedgerInfo] = {}
    ledgers = LedgerList()
    rows = metadata.ledgers(ml_id)
    current = rows.pop() if rows and not rows[-1].closed else None
    for info in rows:
        if not info.closed:  # cannot happen (rollover is one commit); if it did, keep what is there
            segment = Segment.recover(directory, info.ledger_id)
            note_damage(segment.damage)
            syncer.count(segment.close())
            info = replace(info, entries=segment.entries, size_bytes=segment.size_bytes, closed=True)
            info = replace(info, closed_at=time.time())
            metadata.update_ledger(info)
        infos[info.ledger_id] = info
        ledgers.append(info.ledger_id, info.entries)
    if current is None:
        now = time.time()
        current = LedgerInfo(metadata.create_ledger(ml_id, now), 0, 0, now, False)
        segment = Segment.create(directory, current.ledger_id, preallocate)
    else:
        segment = Segment.recover(directory, current.ledger_id, preallocate)
        note_damage(segment.damage)
    infos[current.ledger_id] = current
    ledgers.append(current.ledger_id, segment.entries)
    return infos, ledgers, segment


def remove_orphan_segments(directory: Path, ledgers: LedgerList, data_dir: Path, name: str) -> None:
    """Account for segment files no ledger row owns.

    Trim deletes the oldest ledgers (rows first, in one commit, then files), so a file older
    than every ledger left is what a crash in the middle of a trim leaves: it is deleted, as
    retention meant. Any other such file cannot be explained and is moved aside.
    """
    first = ledgers.ids()[0]
    for path in sorted(directory.iterdir()):
        match = _SEGMENT_FILE.match(path.name)
        if not match or int(match.group(1)) in ledgers:
            continue
        if int(match.group(1)) < first:
            path.unlink(missing_ok=True)
        else:
            move_aside(data_dir, path, f"{name}: no ledger row owns this segment file")
