"""Benchmark: how soon group commit makes an entry durable, and how many fsync rounds a burst takes.

The storage tests check what group commit does (a lone entry is synced without company, a burst
shares rounds, the ``interval`` policy waits out its interval); how fast and how few are figures
of the machine and its disk, measured here straight through ``magnetar.storage`` (no network):

- ``lone``: one entry at a time with ``fsync_policy = "always"``, each waited for before the
  next: the time from ``add_entry`` to its durable callback (microseconds);
- ``burst_always``: ``--burst`` entries added at once with ``always``: fsync rounds per burst
  (a round takes what arrived while the previous fsync ran);
- ``burst_interval``: the same with ``interval`` (``--interval-ms``): rounds per burst (one when
  the burst is written within the interval) and the time from the first add to the last
  callback (milliseconds; at least the interval).

Prints one JSON object.

    .venv/bin/python -m bench.group_commit                 # in a temp dir
    .venv/bin/python -m bench.group_commit --lone 1000 --out /tmp/group-commit.json
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.machine import describe
from bench.output import emit
from bench.stats import latency_summary, spread
from magnetar.storage import Storage, StorageConfig

TOPIC = "persistent://public/default/bench-group-commit"


class Completions:
    """Counts durable callbacks (from the fsync thread) and lets the caller wait for a number."""

    def __init__(self) -> None:
        self.done = 0
        self.errors = 0
        self._cond = threading.Condition()

    def __call__(self, position, error) -> None:
        with self._cond:
            self.done += 1
            self.errors += error is not None
            self._cond.notify_all()

    def wait(self, count: int, timeout: float = 30.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self.done >= count, timeout):
                raise RuntimeError(f"{self.done} of {count} entries durable after {timeout} s")


def lone_latencies_us(data_dir: Path, count: int, payload: bytes) -> list[float]:
    storage = Storage(StorageConfig(data_dir / "lone", fsync_policy="always"))
    try:
        ml = storage.open_managed_ledger(TOPIC)
        completions = Completions()
        latencies = []
        for n in range(1, count + 1):
            started = time.perf_counter()
            ml.add_entry(payload, completions)
            completions.wait(n)
            latencies.append((time.perf_counter() - started) * 1e6)
        if completions.errors:
            raise RuntimeError(f"{completions.errors} adds failed")
        return latencies
    finally:
        storage.close()


def bursts(
    data_dir: Path, repeats: int, size: int, payload: bytes, **config
) -> tuple[list[int], list[float]]:
    """Rounds per burst of ``size`` adds, and milliseconds from the first add to the last callback."""
    storage = Storage(StorageConfig(data_dir, **config))
    rounds, elapsed_ms = [], []
    try:
        ml = storage.open_managed_ledger(TOPIC)
        completions = Completions()
        for n in range(1, repeats + 1):
            rounds_before = storage.sync_rounds
            started = time.perf_counter()
            for _ in range(size):
                ml.add_entry(payload, completions)
            completions.wait(n * size)
            elapsed_ms.append((time.perf_counter() - started) * 1e3)
            rounds.append(storage.sync_rounds - rounds_before)
        if completions.errors:
            raise RuntimeError(f"{completions.errors} adds failed")
        return rounds, elapsed_ms
    finally:
        storage.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.group_commit", description=__doc__.split("\n")[0])
    parser.add_argument("--lone", type=int, default=200, help="lone entries timed one by one (200)")
    parser.add_argument("--burst", type=int, default=100, help="entries per burst (100)")
    parser.add_argument("--repeats", type=int, default=20, help="bursts per policy (20)")
    parser.add_argument("--interval-ms", type=float, default=50.0, help="for the interval policy (50)")
    parser.add_argument("--payload-size", type=int, default=100)
    parser.add_argument("--data-dir", type=Path, help="default: a temp dir, removed")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args(argv)
    payload = b"x" * args.payload_size
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="magnetar-group-commit-"))
    try:
        lone = lone_latencies_us(data_dir, args.lone, payload)
        always_rounds, always_ms = bursts(
            data_dir / "always", args.repeats, args.burst, payload, fsync_policy="always"
        )
        interval_rounds, interval_ms = bursts(
            data_dir / "interval",
            args.repeats,
            args.burst,
            payload,
            fsync_policy="interval",
            fsync_interval_ms=args.interval_ms,
        )
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    result = {
        "benchmark": "group_commit",
        "machine": describe(),
        "payload_size": args.payload_size,
        "lone": {"latency_us": latency_summary(lone)},
        "burst_always": {
            "entries": args.burst,
            "rounds": spread(always_rounds).as_dict(),
            "ms": spread(always_ms).as_dict(),
        },
        "burst_interval": {
            "entries": args.burst,
            "interval_ms": args.interval_ms,
            "rounds": spread(interval_rounds).as_dict(),
            "ms": spread(interval_ms).as_dict(),
        },
    }
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
