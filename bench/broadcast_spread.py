"""Benchmark: one topic's broadcast fan-out with 1 and N broker workers, side by side in one run
(docs/architecture.md, the spread; issue 35's "one connection per consumer" case).

Each run is a ``bench.lean`` run (``bench/lean/``) on a fresh broker started with ``--workers N``:
``--consumers`` broadcast consumers of one topic, **each on a connection of its own**, held by
``--processes`` generator processes, their connections spread over source addresses 127.0.0.2,
.3, ... (10,000 each), so the kernel's SO_REUSEPORT hash spreads them over the workers. Each
connection looks the topic up first, as the official client does (the spread topic's LOOKUP names
the shared port: a Redirect there, then Connect), then subscribes; ``--official`` of the consumers
go through the official client. With more than one worker the topic is made spread first (one
broadcast consumer at its owner). Then ``--messages`` messages of ``--size`` bytes at ``--rate``.

Reported per run, then side by side: connect time (all subscribed), consumers refused, the
sockets each worker holds, the broker's CPU per delivery (the supervisor's and every worker's
CPU over the delivery window, over consumer x message deliveries; of it the kernel's), deliveries
per second, latency from the broker timestamp (P50 / P99 / max), broker RSS per consumer (every
process's), and whether every consumer got every message once and in order. Ratios are to the
first row (``--workers`` in the order given). Prints one JSON document, a markdown table on
stderr (``--out`` writes both).

    .venv/bin/python -m bench.broadcast_spread --consumers 10000 --messages 10 --rate 0.5 --size 10240
    .venv/bin/python -m bench.broadcast_spread --workers 8 --consumers 100000 --processes 6 ...
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from dataclasses import replace
from pathlib import Path

from bench.lean.coordinator import Settings, run
from bench.machine import describe

CORRECT = "every_consumer_got_everything_once_in_order"


def row(doc: dict) -> dict:
    """The figures of one run that the table shows."""
    c, b, d = doc["connect"], doc["broker"], doc["delivery"]
    latency = doc["lean"]["latency_ms"]["from_broker_timestamp"]
    official = doc.get("official")
    return {
        "load_average_at_start": doc["load_average_at_start"][0],
        "connect_s": c["all_subscribed_s"],
        "lean_connect_s": c["lean_all_subscribed_s"],
        "failed_consumers": c["failed_consumers"],
        "sockets_per_worker": c.get("sockets_per_worker"),
        "cpu_us_per_delivery": b["cpu_us_per_delivery"],
        "system_us_per_delivery": b["system_us_per_delivery"],
        "rss_per_consumer_kib": b["rss_per_consumer_kib"],
        "deliveries": d["deliveries"],
        "expected": d["expected"],
        "deliveries_per_s": d["deliveries_per_s"],
        "p50_ms": latency["p50"],
        "p99_ms": latency["p99"],
        "max_ms": latency["max"],
        "official_p99_ms": official["latency_ms"]["from_publish_time"]["p99"] if official else None,
        "generator_cpu_us_per_delivery": doc["generator"]["lean_cpu_us_per_delivery"],
        "all_once_in_order": d[CORRECT],
        "errors": [e for p in c["per_process"] for e in p["errors"]][:5],
    }


def spread(settings: Settings, workers: list[int]) -> dict:
    """One run per worker count, the same settings; a run that fails is a row saying so."""
    rows = []
    for n in workers:
        try:
            result = {"workers": n, **row(run(replace(settings, workers=n, lookup=True)))}
        except Exception as exc:  # a failed run is a result
            result = {"workers": n, "error": repr(exc), "traceback": traceback.format_exc(limit=5)}
        rows.append(result)
    base = rows[0].get("cpu_us_per_delivery")
    for result in rows:
        if base and result.get("cpu_us_per_delivery"):
            result["cpu_ratio"] = round(result["cpu_us_per_delivery"] / base, 2)
    return {
        "benchmark": "bench.broadcast_spread: one topic's broadcast consumers, one connection each",
        "machine": describe(),
        "settings": {**vars(settings), "workers": workers},
        "rows": rows,
    }


def markdown(doc: dict) -> str:
    s, m = doc["settings"], doc["machine"]
    lines = [
        f"### bench.broadcast_spread: {s['consumers']:,} broadcast consumers, one connection each, "
        f"{s['messages']} x {s['size']:,} B at {s['rate']} msg/s",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; {s['processes']} generator "
        f"processes, {s['official']} consumers through the official client; fsync {s['fsync']}.",
        "",
        "| workers | connect s (lean, all) | refused | sockets per worker "
        "| broker CPU / delivery (kernel) | ratio | deliveries/s | P50 / P99 / max ms (broker timestamp) "
        "| RSS / consumer | all once, in order |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in doc["rows"]:
        if "error" in r:
            lines.append(f"| {r['workers']} | failed: {r['error']} |||||||||")
            continue
        sockets = ", ".join(f"{v:,}" for v in (r["sockets_per_worker"] or {}).values()) or "-"
        lines.append(
            f"| {r['workers']} | {r['lean_connect_s']}, {r['connect_s']} | {r['failed_consumers']} "
            f"| {sockets} | "
            f"{r['cpu_us_per_delivery']} µs ({r['system_us_per_delivery']}) | {r.get('cpu_ratio', '')} | "
            f"{r['deliveries_per_s']} | {r['p50_ms']} / {r['p99_ms']} / {r['max_ms']} | "
            f"{r['rss_per_consumer_kib']} KiB | {r['all_once_in_order']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.broadcast_spread",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="worker counts to run, in order"
    )
    parser.add_argument(
        "--consumers", type=int, default=1000, help="consumers in all (official ones included)"
    )
    parser.add_argument("--processes", type=int, default=2, help="generator processes for the lean consumers")
    parser.add_argument("--official", type=int, default=0, help="consumers through the official client")
    parser.add_argument("--messages", type=int, default=10)
    parser.add_argument("--size", type=int, default=10240, help="bytes per message")
    parser.add_argument("--rate", type=float, default=1.0, help="messages per second")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds from the first send to wait")
    parser.add_argument("--concurrency", type=int, default=256, help="connections set up at once per process")
    parser.add_argument(
        "--probe", action="store_true", help="a probe producer on another topic (bench.lean's)"
    )
    parser.add_argument("--out", type=Path, help="write the JSON document here (and the table beside, .md)")
    args = parser.parse_args(argv)
    if not 0 <= args.official <= args.consumers or args.processes < 1 or min(args.workers) < 1:
        parser.error("need 0 <= --official <= --consumers, --processes >= 1, every --workers >= 1")
    settings = Settings(
        consumers=args.consumers,
        processes=args.processes,
        official=args.official,
        messages=args.messages,
        size=args.size,
        rate=args.rate,
        timeout=args.timeout,
        concurrency=args.concurrency,
        no_probe=not args.probe,
    )
    doc = spread(settings, args.workers)
    text = json.dumps(doc, indent=2)
    print(text)
    summary = markdown(doc)
    print(summary, file=sys.stderr)
    if args.out is not None:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".md").write_text(summary)
    return 0 if all(r.get("all_once_in_order") and not r.get("failed_consumers") for r in doc["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
