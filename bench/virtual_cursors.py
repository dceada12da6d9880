"""Benchmark: durable virtual cursors of many broadcast consumers (``storage/virtual_cursors.py``),
no network.

A broadcast subscription keeps each consumer's virtual cursor (what it acknowledged) durable; the
ones changed between two cursor flushes are written in one SQLite transaction. This measures,
straight through ``magnetar.storage``, for N virtual cursors all changed between flushes (the
worst case: every consumer acknowledged something):

* the flush, split in its two parts: taking the changes (encoding each distinct state once, and
  each bucket that holds a changed one: ``storage/virtual_cursor_buckets.py``) and the SQLite
  transaction that writes the buckets;
* reading them back after a reopen (what a restarted broker does once per subscription);
* the metadata store's size.

Two shapes: ``keep-up`` (every consumer at one of three positions, no holes: consumers that keep
up share a state) and ``holes`` (each consumer at its own position with two entries acknowledged
past it and a batch acknowledged in part).

    .venv/bin/python -m bench.virtual_cursors --cursors 10000 100000 --out /tmp/virtual_cursors.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.machine import describe
from bench.output import emit
from magnetar.storage import Position, Storage, StorageConfig
from magnetar.storage.virtual_cursors import VirtualCursorState

TOPIC = "persistent://public/default/vehicles"


def state_of(
    shape: str, i: int, round_no: int, shared: dict[Position, VirtualCursorState]
) -> VirtualCursorState:
    base = 10 * round_no
    if shape == "keep-up":  # the broker hands cursors at one position one state object
        position = Position(5, base + i % 3)
        return shared.setdefault(position, VirtualCursorState(position))
    at = base + i % 1000
    return VirtualCursorState(
        Position(5, at), (Position(5, at + 2), Position(5, at + 5)), ((Position(5, at + 3), (0b1010,)),)
    )


def measure(n: int, shape: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        storage = Storage(StorageConfig(data_dir))
        ml = storage.open_managed_ledger(TOPIC)
        ml.open_cursor("fans")
        store = ml.virtual_cursors("fans")
        names = [f"vehicle-{i:06d}" for i in range(n)]
        takes, writes = [], []
        for r in range(rounds):
            shared: dict[Position, VirtualCursorState] = {}
            for i, name in enumerate(names):
                store.put(name, state_of(shape, i, r, shared))
            t0 = time.perf_counter()
            changes = store.take_changes()
            t1 = time.perf_counter()
            storage.metadata.write_virtual_cursors(
                ml._id, [("fans", changes.cleared, changes.write, changes.gone)]
            )
            t2 = time.perf_counter()
            takes.append(t1 - t0)
            writes.append(t2 - t1)
        storage.close()
        size = sum(p.stat().st_size for p in data_dir.glob("metadata.sqlite*"))
        again = Storage(StorageConfig(data_dir))
        t0 = time.perf_counter()
        loaded = again.open_managed_ledger(TOPIC).virtual_cursors("fans").load()
        load_s = time.perf_counter() - t0
        again.close()
        assert len(loaded) == n
        take, write = statistics.median(takes), statistics.median(writes)
        return {
            "virtual_cursors": n,
            "shape": shape,
            "flush_s": round(take + write, 4),
            "take_s": round(take, 4),
            "write_s": round(write, 4),
            "us_per_cursor": round(1e6 * (take + write) / n, 2),
            "load_s": round(load_s, 4),
            "metadata_bytes": size,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cursors", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--rounds", type=int, default=3, help="flushes per case; the median is reported")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    results = [measure(n, shape, args.rounds) for n in args.cursors for shape in ("keep-up", "holes")]
    report = {"machine": describe(), "results": results}
    emit(report, args.out)


if __name__ == "__main__":
    main()
