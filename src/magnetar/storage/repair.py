"""Rebuild the metadata store from the files under ``ledgers/`` (what ``magnetar repair`` runs).

The metadata store is the only place that says which ledgers make up a managed ledger and which
cursor ledger holds a subscription. When it is lost (deleted, damaged, replaced by an empty one)
the data is still all there; this finds it again:

- the managed ledger's name from its directory's name (``names.decode_name``);
- its ledgers from the segment files (``<id>.log``), in id order: every one but the last is
  closed with the entries that read back intact, the last stays open (the broker recovers its
  tail on start, as after any crash);
- its cursors from the cursor ledgers in ``cursors/``: the owner's name from ``<id>.name``, the
  state from the newest cursor ledger with an intact marker.

It never deletes anything. A directory whose name cannot be decoded stays where it is (and is
reported); a cursor ledger with no recorded name is moved to ``orphaned/`` (its subscription is
lost: a consumer that subscribes again starts at its initial position). Managed ledgers the
store already knows are left as they are. A store that cannot be opened is moved aside and a new
one is built.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.storage.cursor_ledger import (
    CURSORS_DIR,
    CursorLedger,
    cursor_ledger_ids,
    cursor_ledger_paths,
    read_owner,
)
from magnetar.storage.ledger_info import LedgerInfo
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.names import decode_name
from magnetar.storage.orphans import move_aside
from magnetar.storage.position import Position
from magnetar.storage.record import scan_records
from magnetar.storage.store import DELETING_SUFFIX, LEDGERS_DIR, METADATA_FILE

_LOG_FILE = re.compile(r"^(\d{20})\.log$")


@dataclass
class RepairReport:
    """What a repair found and did, in lines an operator reads."""

    rebuilt_store: bool = False
    topics: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)


def repair(data_dir: Path) -> RepairReport:
    """Record in the metadata store every managed ledger found under ``data_dir/ledgers``.

    The caller must make sure no broker runs on ``data_dir`` (the CLI holds the broker's lock).
    """
    data_dir = Path(data_dir)
    report = RepairReport()
    ledgers_dir = data_dir / LEDGERS_DIR
    store = _open_store(data_dir, report)
    try:
        if not ledgers_dir.exists():
            report.say(f"no {ledgers_dir}: nothing to repair")
            return report
        known = store.managed_ledger_directories()
        highest = store.last_ledger_id()
        for directory in sorted(p for p in ledgers_dir.iterdir() if p.is_dir()):
            highest = max(highest, _highest_id(directory))
            if directory.name.endswith(DELETING_SUFFIX) or directory.name in known:
                continue
            _import(store, data_dir, directory, report)
        store.raise_ledger_counter(highest)
        if not report.topics:
            report.say("every managed-ledger directory is known to the metadata store: nothing to do")
    finally:
        store.close()
    return report


def _open_store(data_dir: Path, report: RepairReport) -> MetadataStore:
    path = data_dir / METADATA_FILE
    existed = path.exists()
    try:
        store = MetadataStore(path)
        store.managed_ledger_names()
    except sqlite3.DatabaseError as exc:
        report.say(f"the metadata store {path} cannot be read ({exc}): moving it aside, building a new one")
        for suffix in ("", "-wal", "-shm"):
            extra = path.with_name(path.name + suffix)
            if extra.exists():
                move_aside(data_dir, extra, "the metadata store is damaged; magnetar repair builds a new one")
        store = MetadataStore(path)
        existed = False
    if not existed or not store.managed_ledger_names():
        report.rebuilt_store = True
        report.lost.append(
            "what only the metadata store held: namespace policies (the tenants and namespaces of the"
            " topics found are created again with default policies), partitioned topics with no"
            " partition found, schemas, topic properties (producer sequence snapshots are rebuilt"
            " from the data; a terminated topic is open again)"
        )
    return store


def _import(store: MetadataStore, data_dir: Path, directory: Path, report: RepairReport) -> None:
    name = decode_name(directory.name)
    if name is None:
        report.say(f"{directory}: the topic name cannot be told from this directory's name; left in place")
        report.lost.append(f"{directory.name}: not imported (unknown name); its files are untouched")
        return
    if store.managed_ledger(name) is not None:
        report.say(f"{directory}: {name} is already recorded with another directory; left in place")
        return
    ledgers = _ledgers(directory)
    cursors = _cursors(data_dir, directory, name, report)
    store.import_managed_ledger(name, directory.name, ledgers, cursors)
    entries = sum(info.entries for info in ledgers[:-1])
    if ledgers:
        last = directory / f"{ledgers[-1].ledger_id:020d}.log"
        entries += _intact_records(last, last.stat().st_size)[0]
    report.topics.append(name)
    report.say(
        f"{name}: {len(ledgers)} ledgers ({', '.join(str(i.ledger_id) for i in ledgers) or 'none'}),"
        f" {entries} entries, {len(cursors)} subscriptions ({', '.join(sorted(cursors)) or 'none'})"
    )


def _ledgers(directory: Path) -> list[LedgerInfo]:
    """A row per segment file: closed with what reads back intact, the last one open."""
    ids = sorted(int(m.group(1)) for p in directory.iterdir() if (m := _LOG_FILE.match(p.name)))
    out = []
    for n, ledger_id in enumerate(ids):
        path = directory / f"{ledger_id:020d}.log"
        stat = path.stat()
        if n == len(ids) - 1:
            out.append(LedgerInfo(ledger_id, 0, 0, stat.st_mtime, False))
            continue
        entries, size = _intact_records(path, stat.st_size)
        out.append(LedgerInfo(ledger_id, entries, size, stat.st_mtime, True, stat.st_mtime))
    return out


def _intact_records(path: Path, file_size: int) -> tuple[int, int]:
    """Entries and data bytes of a closed ledger's log, read only (up to the first bad record)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        entries, end = 0, 0
        for _, record_end in scan_records(fd, 0, file_size):
            entries += 1
            end = record_end
        return entries, end
    finally:
        os.close(fd)


def _cursors(
    data_dir: Path, directory: Path, topic: str, report: RepairReport
) -> dict[str, tuple[Position, int]]:
    """Each named cursor's newest cursor ledger with an intact marker (mark-delete, ledger id)."""
    cursor_dir = directory / CURSORS_DIR
    found: dict[str, tuple[Position, int]] = {}
    unmarked: dict[str, int] = {}
    for ledger_id in sorted(cursor_ledger_ids(cursor_dir), reverse=True):
        owner = read_owner(cursor_dir, ledger_id)
        if owner is None:
            for path in cursor_ledger_paths(cursor_dir, ledger_id):
                if path.exists():
                    move_aside(data_dir, path, f"{topic}: a cursor ledger whose subscription name is unknown")
            report.lost.append(
                f"{topic}: cursor ledger {ledger_id} has no recorded subscription name; moved to orphaned/."
                " Its subscription is gone: a consumer subscribing again starts at its initial position"
                " (subscribe from Earliest, or reset the cursor, to get the backlog)"
            )
            continue
        if owner in found:
            continue  # an older cursor ledger of the same cursor (a roll a crash interrupted)
        ledger = CursorLedger.open(cursor_dir, ledger_id)
        try:
            marker = ledger.last_valid_marker()
        finally:
            ledger.close()
        if marker is None:
            unmarked.setdefault(owner, ledger_id)
            continue
        found[owner] = (marker[1].mark_delete, ledger_id)
    for owner, ledger_id in unmarked.items():
        if owner not in found:
            found[owner] = (Position.EARLIEST, ledger_id)
            report.lost.append(
                f"{topic}: subscription {owner}: no intact marker in cursor ledger {ledger_id};"
                " it starts again from the earliest message (everything is delivered again)"
            )
    return found


def _highest_id(directory: Path) -> int:
    """The highest ledger id any file of a managed-ledger directory carries (-1: none)."""
    ids = {int(m.group(1)) for p in directory.iterdir() if (m := _LOG_FILE.match(p.name))}
    ids |= cursor_ledger_ids(directory / CURSORS_DIR)
    return max(ids, default=-1)
