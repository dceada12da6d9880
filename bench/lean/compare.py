"""``--compare``: the seed's Figure 8 side by side, in one invocation on one machine.

For each N of the sweep, three runs with the same settings: broadcast on Magnetar (one
subscription), exclusive on Magnetar and exclusive on the peer (one Exclusive subscription per
consumer). A run that fails (refusals, timeouts, an exception) is a row that says so, not the
end of the sweep; a case that failed at some N is not tried at larger ones, so the table shows
where each stops. Latency is from the producer's publish time in every row (the peer sends no
broker timestamp). Ratios are to the broadcast row of the same N.
"""

from __future__ import annotations

import traceback
from dataclasses import replace

from bench.lean.coordinator import Settings, run
from bench.machine import describe

CASES = (("broadcast", "magnetar"), ("exclusive", "magnetar"), ("exclusive", "pulsar-lite"))


def compare(settings: Settings, sweep: list[int]) -> dict:
    """Every case at every N (ascending); one document with a row per run."""
    rows: list[dict] = []
    stopped: dict[tuple[str, str], int] = {}
    for n in sorted(sweep):
        for mode, broker in CASES:
            case = {"consumers": n, "mode": mode, "broker": broker}
            if (mode, broker) in stopped:
                rows.append({**case, "error": f"not tried: failed at {stopped[mode, broker]:,}"})
                continue
            one = replace(settings, consumers=n, mode=mode, broker=broker, official=min(settings.official, n))
            try:
                row = {**case, **_row(run(one))}
            except Exception as exc:  # a failed run is a result of the sweep
                row = {**case, "error": f"{exc!r}", "traceback": traceback.format_exc(limit=5)}
            if row.get("error") or row["failed_consumers"] or not row["all_once_in_order"]:
                stopped[mode, broker] = n
            rows.append(row)
    return {
        "benchmark": "bench.lean --compare: broadcast vs exclusive subscriptions, Magnetar vs pulsar-lite",
        "machine": describe(),
        "settings": {**vars(settings), "sweep": sorted(sweep)},
        "rows": rows,
    }


def _row(doc: dict) -> dict:
    c, b, d = doc["connect"], doc["broker"], doc["delivery"]
    latency = doc["lean"]["latency_ms"]["from_publish_time"]
    errors = [e for p in c["per_process"] for e in p["errors"]]
    return {
        "broker_version": doc["broker_under_test"],
        "load_average_at_start": doc["load_average_at_start"][0],
        "connect_s": c["all_subscribed_s"],
        "failed_consumers": c["failed_consumers"],
        "rss_per_consumer_kib": b["rss_per_consumer_kib"],
        "cpu_us_per_delivery": b["cpu_us_per_delivery"],
        "peak_rss_kib": b["peak_rss_kib"],
        "p50_ms": latency["p50"],
        "p99_ms": latency["p99"],
        "max_ms": latency["max"],
        "deliveries": d["deliveries"],
        "expected": d["expected"],
        "window_s": d["window_s"],
        "clean_consumers": d["clean_consumers"],
        "duplicates": sum(
            (doc[k] or {}).get("correctness", {}).get("duplicates", 0) for k in ("lean", "official")
        ),
        "gaps": sum((doc[k] or {}).get("correctness", {}).get("gaps", 0) for k in ("lean", "official")),
        "all_once_in_order": d["every_consumer_got_everything_once_in_order"],
        "first_errors": errors[:3],
    }


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


def _verdict(row: dict) -> str:
    if row["all_once_in_order"]:
        return "yes"
    missing = row["expected"] - row["deliveries"]
    return f"no: {missing:,} missing, {row['duplicates']:,} duplicates, {row['gaps']:,} skipped"


def markdown(doc: dict) -> str:
    s, m = doc["settings"], doc["machine"]
    lines = [
        "### bench.lean --compare: broadcast vs one Exclusive subscription per consumer",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}. {s['messages']} x {s['size']} B "
        f"at {s['rate']} msg/s, fsync {s['fsync']} (Magnetar), {s['processes']} generator processes, "
        f"{s['per_connection']} consumer(s) per connection, {s['official']} through the official client. "
        "Latency from the publish time; ratios to the broadcast row of the same N. Load average at "
        f"each start: {', '.join(str(r.get('load_average_at_start', '-')) for r in doc['rows'])}.",
        "",
        "| N | mode, broker | connect s | failed | broker RSS / consumer KiB | broker CPU / delivery µs "
        "(ratio) | P50 / P99 / max ms | clean / N | all once, in order |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    base: dict[int, dict] = {}
    for row in doc["rows"]:
        n, case = row["consumers"], f"{row['mode']}, {row['broker']}"
        if row.get("error"):
            lines.append(f"| {n:,} | {case} | - | - | - | - | - | - | no: {row['error'][:120]} |")
            continue
        if row["mode"] == "broadcast":
            base[n] = row
        ref = base.get(n, {})
        cpu = row["cpu_us_per_delivery"]
        lines.append(
            f"| {n:,} | {case} | {row['connect_s']} ({_ratio(row['connect_s'], ref.get('connect_s'))}) "
            f"| {row['failed_consumers']:,} | {row['rss_per_consumer_kib']} | {cpu} "
            f"({_ratio(cpu, ref.get('cpu_us_per_delivery'))}) | {row['p50_ms']} / {row['p99_ms']} / "
            f"{row['max_ms']} | {row['clean_consumers']:,} | {_verdict(row)} |"
        )
    return "\n".join(lines) + "\n"
