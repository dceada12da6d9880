"""Benchmark: PIP 81 ack state with 1,000,000 and 10,000,000 holes over 100 ledgers.

For each size, a child process builds a cursor's ack state straight through
``magnetar.storage`` (``IndividualAcks`` over a ``CursorStore``, the objects a
durable ``ManagedCursor`` uses) with the default memory bound, one ledger at a
time: acked runs of 1-8 entries separated by holes of 1-4. Then it measures

* the first flush, which writes the whole state (every page and a marker),
* a roll of the cursor ledger (copying the live pages into a new one),
* flushes after one ack in one ledger (one dirty page and a marker), and what
  the earlier one-JSON-row form would have written instead;

and a second child process measures recovery: opening the cursor ledger and
finding the newest valid marker, answering the first question (one page
swapped in), and swapping every page in and out once. Peak memory is each
process's peak RSS (VmHWM) against its RSS before the state existed.

    .venv/bin/python -m bench.ack_state --out /tmp/ack_state.json
    .venv/bin/python -m bench.ack_state --holes 1000000 --out /tmp/small.json
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from itertools import accumulate
from pathlib import Path

from bench.machine import describe
from magnetar.storage.ack_page import AckPage
from magnetar.storage.ack_ranges import RangeSet
from magnetar.storage.ack_state import IndividualAcks
from magnetar.storage.config import StorageConfig
from magnetar.storage.cursor_ledger import CursorLedger
from magnetar.storage.cursor_store import CursorStore
from magnetar.storage.position import Position

CURSOR_LEDGER_ID = 1
MARK_DELETE = Position(0, -1)


def rss_kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def limits() -> dict[str, int]:
    defaults = StorageConfig(data_dir=Path("."))
    return {
        "memory_limit": defaults.max_individual_ack_cache_bytes_per_cursor,
        "min_roll_bytes": defaults.cursor_ledger_min_roll_bytes,
    }


class Ids:
    """Ledger ids for cursor ledgers, as the metadata store would hand them out."""

    def __init__(self, start: int) -> None:
        self.next = start

    def __call__(self) -> int:
        self.next += 1
        return self.next - 1


def no_commit(ledger_id: int, mark_delete: Position) -> None:
    pass


def random_page(ledger_id: int, holes: int, rng: random.Random) -> AckPage:
    """``holes`` acked runs of 1-8 entries, each followed by a hole of 1-4 entries."""
    bounds = array("q", bytes(16 * holes))
    bounds[0::2] = array("q", rng.choices(range(1, 5), k=holes))  # hole before each run
    bounds[1::2] = array("q", rng.choices(range(1, 9), k=holes))  # the acked run
    bounds = array("q", accumulate(bounds))
    return AckPage(ledger_id, RangeSet.from_arrays(bounds[0::2], bounds[1::2]))


def json_form_bytes(page: AckPage) -> int:
    """Bytes of this ledger's share of the earlier one-row JSON form: ``[ledger,start,end],`` per range."""
    prefix = len(str(page.ledger_id)) + 4  # [ , , ] and the comma between triples
    starts, ends = page.ranges.columns()
    return sum(map(len, map(str, starts))) + sum(map(len, map(str, ends))) + prefix * len(starts)


def write_phase(directory: Path, holes: int, ledgers: int, seed: int) -> dict:
    rng = random.Random(seed)
    base_rss = rss_kib("VmRSS")
    store = CursorStore.create(directory, Ids(CURSOR_LEDGER_ID), no_commit, **limits())
    acks = IndividualAcks(store, store.memory_limit)
    per_ledger = holes // ledgers
    json_bytes = 2
    unbounded = 0
    started = time.perf_counter()
    for ledger_id in range(1, ledgers + 1):
        page = random_page(ledger_id, per_ledger, rng)
        json_bytes += json_form_bytes(page)
        unbounded += page.memory_bytes()
        acks.adopt(page)  # over the memory bound: the least recently used page is written and dropped
    build_s = time.perf_counter() - started

    started = time.perf_counter()
    full_bytes = store.flush(MARK_DELETE, acks)
    full_s = time.perf_counter() - started
    pages_written = store.last_flush_pages

    started = time.perf_counter()
    store.roll(MARK_DELETE, acks)
    roll_s = time.perf_counter() - started
    rolled = CursorLedger.open(directory, store.ledger_id)
    started = time.perf_counter()
    assert rolled.last_valid_marker() is not None
    after_roll_s = time.perf_counter() - started  # the worst case: every page is checked
    rolled.close()

    one_bytes, one_s = [], []
    for ledger_id in rng.sample(range(1, ledgers + 1), 5):
        # run_end of any entry is an entry that is not acked (and swaps the page in, untimed)
        hole = acks.run_end(Position(ledger_id, rng.randrange(per_ledger)))
        started = time.perf_counter()
        acks.add(Position(ledger_id, hole))
        one_bytes.append(store.flush(MARK_DELETE, acks))
        one_s.append(time.perf_counter() - started)
        assert store.last_flush_pages == 1
    store.close()
    median_one = statistics.median(one_bytes)
    return {
        "holes": acks.range_count,
        "acked_entries": len(acks),
        "ledgers": ledgers,
        "build_s": round(build_s, 2),
        "full_flush_bytes": full_bytes,
        "full_flush_pages": pages_written,
        "full_flush_s": round(full_s, 3),
        "bytes_per_hole": round(full_bytes / acks.range_count, 3),
        "roll_s": round(roll_s, 3),
        "find_marker_after_roll_s": round(after_roll_s, 4),
        "one_dirty_ledger_flush_bytes": one_bytes,
        "one_dirty_ledger_flush_s": [round(s, 4) for s in one_s],
        "full_over_one_dirty": round(full_bytes / median_one, 1),
        "json_form_bytes_per_flush": json_bytes,
        "json_over_one_dirty": round(json_bytes / median_one, 1),
        "pages_in_memory": acks.resident_count,
        "memory_bytes_estimate": acks.memory_bytes,
        "unbounded_memory_estimate_bytes": unbounded,
        "memory_limit_bytes": acks.memory_limit,
        "swap_outs_while_building": acks.swap_outs,
        "rss_before_kib": base_rss,
        "peak_rss_kib": rss_kib("VmHWM"),
        "peak_rss_over_before_kib": rss_kib("VmHWM") - base_rss,
        "cursor_ledger_bytes": store.stats()["cursor_ledger_bytes"],
    }


def recover_phase(directory: Path, ledgers: int, seed: int) -> dict:
    rng = random.Random(seed)
    base_rss = rss_kib("VmRSS")
    ledger_id = max(int(p.stem) for p in directory.glob("*.log"))
    started = time.perf_counter()
    store = CursorStore.open(directory, ledger_id, Ids(ledger_id + 1), no_commit, **limits())
    assert store.recovered is not None, "no marker found"
    acks = IndividualAcks(store, store.memory_limit)
    acks.load(store.recovered.pages)
    open_s = time.perf_counter() - started
    holes, acked = acks.range_count, len(acks)

    started = time.perf_counter()
    acks.run_end(Position(rng.randrange(1, ledgers + 1), 1000))
    first_answer_s = time.perf_counter() - started

    started = time.perf_counter()
    for ledger_id in range(1, ledgers + 1):
        acks.run_end(Position(ledger_id, 5000))
    swap_all_s = time.perf_counter() - started
    store.close()
    return {
        "recovered_holes": holes,
        "recovered_acked_entries": acked,
        "open_and_find_marker_s": round(open_s, 4),
        "first_answer_s": round(first_answer_s, 4),
        "swap_every_page_once_s": round(swap_all_s, 2),
        "pages_in_memory_after": acks.resident_count,
        "swap_ins": acks.swap_ins,
        "rss_before_kib": base_rss,
        "peak_rss_kib": rss_kib("VmHWM"),
        "peak_rss_over_before_kib": rss_kib("VmHWM") - base_rss,
    }


def run_child(phase: str, directory: Path, holes: int, ledgers: int, seed: int) -> dict:
    """One phase in a fresh process, so its peak RSS is its own."""
    command = [sys.executable, "-m", "bench.ack_state", "--child", phase, str(directory), str(holes)]
    command += ["--ledgers", str(ledgers), "--seed", str(seed)]
    out = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    if out.returncode != 0:
        raise SystemExit(f"{phase} phase failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--ledgers", type=int, default=100)
    parser.add_argument("--seed", type=int, default=81)
    parser.add_argument("--dir", type=Path, help="where cursor ledgers go (default: a temporary directory)")
    parser.add_argument("--out", type=Path, help="write the results here as JSON (required)")
    parser.add_argument("--child", nargs=3, metavar=("PHASE", "DIR", "HOLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        phase, directory, holes = args.child[0], Path(args.child[1]), int(args.child[2])
        if phase == "write":
            result = write_phase(directory, holes, args.ledgers, args.seed)
        else:
            result = recover_phase(directory, args.ledgers, args.seed)
        print(json.dumps(result))
        return
    if args.out is None:
        parser.error("--out is required")

    root = Path(tempfile.mkdtemp(prefix="magnetar-ack-bench-", dir=args.dir))
    results = {"machine": describe(), "memory_limit_bytes": limits()["memory_limit"], "runs": []}
    try:
        for holes in args.holes:
            directory = root / f"holes-{holes}"
            started = time.perf_counter()
            written = run_child("write", directory, holes, args.ledgers, args.seed)
            recovered = run_child("recover", directory, holes, args.ledgers, args.seed)
            run = {"holes": holes, "write": written, "recover": recovered}
            run["wall_s"] = round(time.perf_counter() - started, 1)
            results["runs"].append(run)
            print(json.dumps(run, indent=2), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
