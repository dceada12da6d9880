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

- its offloaded ledgers (tiered storage) from the object store, when one is given
  (``ObjectStoreLedgers``, which ``magnetar.offload.recovery`` implements: storage itself does no
  network I/O): a ledger whose only copy is its object is recorded as offloaded, its local files
  gone, and one with both keeps its object as its verified copy; a managed ledger whose every
  ledger is offloaded and whose directory is gone too is found from the store alone.

It never deletes anything local. A directory whose name cannot be decoded stays where it is (and
is reported); a cursor ledger with no recorded name is moved to ``orphaned/`` (its subscription is
lost: a consumer that subscribes again starts at its initial position); further copies of a
ledger recorded with another object are queued for deletion from the store, objects that do not
read back whole are reported and left. Managed ledgers the store already knows are left as they
are. A store that cannot be opened is moved aside and a new one is built.
"""

from __future__ import annotations

import os
import re
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

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
class StoreLedgers:
    """What the object store holds of one managed-ledger directory."""

    #: One verified copy per ledger (closed, ``offload`` set, its local files taken as gone).
    ledgers: list[LedgerInfo] = field(default_factory=list)
    #: Further verified copies of a ledger found (attempts whose commit the lost metadata held).
    duplicates: list[str] = field(default_factory=list)
    #: Objects that do not read back as a whole ledger: (key, why).
    unreadable: list[tuple[str, str]] = field(default_factory=list)


class ObjectStoreLedgers(Protocol):
    """The offloaded ledgers of the object store, found again without the metadata store."""

    def directories(self) -> list[str]:
        """The managed-ledger directories (names on disk) the store holds objects of."""
        ...

    def find(self, directory: str) -> StoreLedgers:
        """The ledgers of ``directory`` the store holds whole."""
        ...


@dataclass
class RepairReport:
    """What a repair found and did, in lines an operator reads."""

    rebuilt_store: bool = False
    topics: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)

    def say(self, line: str) -> None:
        self.lines.append(line)


def repair(data_dir: Path, offloaded: ObjectStoreLedgers | None = None) -> RepairReport:
    """Record in the metadata store every managed ledger found under ``data_dir/ledgers`` (and,
    with ``offloaded``, in the object store).

    The caller must make sure no broker runs on ``data_dir`` (the CLI holds the broker's lock).
    """
    data_dir = Path(data_dir)
    report = RepairReport()
    ledgers_dir = data_dir / LEDGERS_DIR
    store = _open_store(data_dir, report)
    try:
        local = sorted(p for p in ledgers_dir.iterdir() if p.is_dir()) if ledgers_dir.exists() else []
        in_store = offloaded.directories() if offloaded is not None else []
        if not local and not in_store:
            report.say(f"no {ledgers_dir}: nothing to repair")
            return report
        known = store.managed_ledger_directories()
        highest = store.last_ledger_id()
        for directory in local:
            highest = max(highest, _highest_id(directory))
            if directory.name.endswith(DELETING_SUFFIX) or directory.name in known:
                continue
            highest = max(highest, _import(store, data_dir, directory, report, offloaded))
        seen = {directory.name.removesuffix(DELETING_SUFFIX) for directory in local}
        for name in in_store:
            if name not in seen and name not in known:
                # Every ledger offloaded, and the directory gone too: the store alone knows it.
                assert offloaded is not None
                highest = max(highest, _import(store, data_dir, ledgers_dir / name, report, offloaded))
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


def _import(
    store: MetadataStore,
    data_dir: Path,
    directory: Path,
    report: RepairReport,
    offloaded: ObjectStoreLedgers | None,
) -> int:
    """Record one managed ledger; the highest ledger id it has (-1: none, or not recorded)."""
    name = decode_name(directory.name)
    if name is None:
        report.say(f"{directory}: the topic name cannot be told from this directory's name; left in place")
        report.lost.append(f"{directory.name}: not imported (unknown name); its files are untouched")
        return -1
    if store.managed_ledger(name) is not None:
        report.say(f"{directory}: {name} is already recorded with another directory; left in place")
        return -1
    found = offloaded.find(directory.name) if offloaded is not None else StoreLedgers()
    if not directory.exists():
        directory.mkdir(parents=True)
        report.lost.append(
            f"{name}: its directory was gone, its ledgers are read from the object store; its"
            " subscriptions (kept on the local disk only) are lost"
        )
    local = _ledgers(directory)
    ledgers, garbage = _with_offloaded(name, local, found, report)
    cursors = _cursors(data_dir, directory, name, report)
    store.import_managed_ledger(name, directory.name, ledgers, cursors, garbage)
    entries = sum(info.entries for info in ledgers if info.closed)
    if local and not local[-1].closed:
        last = directory / f"{local[-1].ledger_id:020d}.log"
        entries += _intact_records(last, last.stat().st_size)[0]
    report.topics.append(name)
    stored = sum(1 for info in ledgers if not info.local)
    report.say(
        f"{name}: {len(ledgers)} ledgers ({', '.join(str(i.ledger_id) for i in ledgers) or 'none'}"
        f"{f'; {stored} in the object store only' if stored else ''}),"
        f" {entries} entries, {len(cursors)} subscriptions ({', '.join(sorted(cursors)) or 'none'})"
    )
    return max((info.ledger_id for info in ledgers), default=-1)


def _with_offloaded(
    name: str, local: list[LedgerInfo], found: StoreLedgers, report: RepairReport
) -> tuple[list[LedgerInfo], list[str]]:
    """The local ledgers and the offloaded ones, by id; the objects to delete (further copies)."""
    ledgers = {info.ledger_id: info for info in local}
    for info in found.ledgers:
        assert info.offload is not None
        mine = ledgers.get(info.ledger_id)
        if mine is None:
            ledgers[info.ledger_id] = info
        elif mine.closed and (mine.entries, mine.size_bytes) == (info.entries, info.size_bytes):
            ledgers[info.ledger_id] = replace(mine, offload=replace(info.offload, local_deleted=False))
        else:
            report.say(
                f"{name}: the object {info.offload.key} does not hold ledger {info.ledger_id} as its"
                " local files do; the local files are used, the object is left in the store"
            )
    for key, why in found.unreadable:
        report.lost.append(
            f"{name}: the object {key} does not read back as a ledger ({why}); left in the store"
        )
    return [ledgers[ledger_id] for ledger_id in sorted(ledgers)], found.duplicates


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
