"""Benchmark: seek by time on a large topic, binary search (broker entry metadata) vs a linear scan.

Writes ``--entries`` entries (default 1,000,000) straight through ``magnetar.storage`` with the
broker's own entry-metadata interceptors (``broker_timestamp`` and ``index``) in front of real
producer bytes, so no network is involved; then seeks to random times with
``magnetar.broker.seek.position_for_time`` (counting entry reads) and with a linear scan from the
first entry (reading in batches of 1000, as a scan would), checks both land on the same entry,
and prints one JSON object: entries read and time per seek for each, and their ratios.

    .venv/bin/python -m bench.seek_by_time                       # 1M entries in a temp dir
    .venv/bin/python -m bench.seek_by_time --data-dir /tmp/b --keep   # reuse it next time
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.machine import describe
from bench.output import emit
from magnetar.broker.entry_metadata import load_interceptors
from magnetar.broker.entry_search import CountingReader, entry_time
from magnetar.broker.seek import position_for_time
from magnetar.protocol import wire
from magnetar.protocol.entry import prepend_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.storage import Storage, StorageConfig

TOPIC = "persistent://public/default/bench-seek-by-time"


def fill(ml, entries: int, payload_size: int) -> float:
    """Write ``entries`` entries as the broker would: interceptors, then the producer's bytes."""
    interceptors = load_interceptors(["broker_timestamp", "index"])
    payload = b"x" * payload_size
    start = time.perf_counter()
    for seq in range(entries):
        producer = encode_headers_and_payload(
            wire.MessageMetadata(
                producer_name="bench", sequence_id=seq, publish_time=time.time_ns() // 1_000_000
            ),
            payload,
        )
        meta = wire.BrokerEntryMetadata()
        for interceptor in interceptors:
            interceptor.intercept(meta, 1)
        ml.add_entry(prepend_entry_metadata(meta, producer))
    return time.perf_counter() - start


def linear_scan(ml, timestamp_ms: int):
    """First entry with time >= timestamp_ms, reading every entry from the first: (position, reads)."""
    reads = 0
    position = ml.first_position()
    last = ml.last_confirmed
    while position is not None and position <= last:
        batch = ml.read_entries(position, 1000)
        for entry in batch:
            reads += 1
            if entry_time(entry.data) >= timestamp_ms:
                return entry.position, reads
        position = ml.next_position(batch[-1].position)
    return ml.next_position(last), reads


def summary(values: list[float]) -> dict:
    values = sorted(values)
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "max": values[-1],
        "min": values[0],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=1_000_000)
    p.add_argument("--payload-size", type=int, default=100, help="bytes of each message's payload")
    p.add_argument("--max-ledger-size-bytes", type=int, default=128 * 1024 * 1024, help="broker default")
    p.add_argument("--seeks", type=int, default=200, help="binary-search seeks to random times")
    p.add_argument("--scans", type=int, default=5, help="linear-scan seeks (each reads up to every entry)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--data-dir", type=Path, help="where to write (default: a temp dir, removed after)")
    p.add_argument("--keep", action="store_true", help="keep --data-dir and reuse its entries next run")
    p.add_argument("--out", type=Path, help="also write the JSON here")
    args = p.parse_args(argv)

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="magnetar-bench-"))
    config = StorageConfig(
        data_dir, fsync_policy="never", max_ledger_size_bytes=args.max_ledger_size_bytes, entry_cache_bytes=0
    )
    rng = random.Random(args.seed)
    try:
        with Storage(config) as storage:
            ml = storage.open_managed_ledger(TOPIC)
            existing = sum(info.entries for info in ml.ledgers())
            write_s = None
            if existing < args.entries:
                write_s = fill(ml, args.entries - existing, args.payload_size)
            first, last = ml.first_position(), ml.last_confirmed
            t_first = entry_time(ml.read_entry(first).data)
            t_last = entry_time(ml.read_entry(last).data)
            n = sum(info.entries for info in ml.ledgers())

            # the first seek opens every ledger's segment file: timed apart as the cold seek
            reader = CountingReader(ml)
            start = time.perf_counter()
            position_for_time(ml, rng.randint(t_first, t_last), reader)
            cold = {"entries_read": reader.reads, "seconds": time.perf_counter() - start}

            targets = [rng.randint(t_first, t_last) for _ in range(args.seeks)]
            bin_reads, bin_times = [], []
            found = {}
            for target in targets:
                reader = CountingReader(ml)
                start = time.perf_counter()
                found[target] = position_for_time(ml, target, reader)
                bin_times.append(time.perf_counter() - start)
                bin_reads.append(reader.reads)

            scan_reads, scan_times = [], []
            for target in targets[: args.scans]:
                start = time.perf_counter()
                position, reads = linear_scan(ml, target)
                scan_times.append(time.perf_counter() - start)
                scan_reads.append(reads)
                if position != found[target]:
                    print(f"mismatch at {target}: scan {position}, binary {found[target]}", file=sys.stderr)
                    return 1
            # the same seeks' binary-search figures, for a like-for-like ratio
            pair_bin_reads = bin_reads[: args.scans]
            pair_bin_times = bin_times[: args.scans]
            result = {
                "benchmark": "seek_by_time",
                "machine": describe(),
                "entries": n,
                "ledgers": len(ml.ledgers()),
                "payload_size": args.payload_size,
                "write_seconds": write_s,
                "binary_search": {
                    "cold_seek": cold,
                    "seeks": len(targets),
                    "entries_read": summary(bin_reads),
                    "seconds": summary(bin_times),
                },
                "linear_scan": {
                    "seeks": len(scan_reads),
                    "entries_read": summary(scan_reads),
                    "seconds": summary(scan_times),
                },
                "ratio_scan_to_binary": {
                    "entries_read": statistics.fmean(scan_reads) / statistics.fmean(pair_bin_reads),
                    "seconds": statistics.fmean(scan_times) / statistics.fmean(pair_bin_times),
                },
            }
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)
    emit(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
