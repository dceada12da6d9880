"""The markdown summary of one ``bench.lean`` run's JSON document."""

from __future__ import annotations

CORRECT = "every_consumer_got_everything_once_in_order"


def markdown(doc: dict) -> str:
    s, c, b, d = doc["settings"], doc["connect"], doc["broker"], doc["delivery"]
    m, g = doc["machine"], doc["generator"]
    lines = [
        f"### bench.lean: {s['consumers']:,} {s['mode']} consumers on {s['broker']}, "
        f"{s['messages']} x {s['size']} B at {s['rate']} msg/s",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, Python {m['python']}; load average at start "
        f"{doc['load_average_at_start'][0]}. Broker: {doc['broker_under_test']}; fsync {s['fsync']}; "
        f"{s['processes']} generator processes, {s['per_connection']} consumer(s) per connection, "
        f"{s['official']} through the official client.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| connect: all lean consumers subscribed | {c['lean_all_subscribed_s']} s "
        f"({c['failed_consumers']} failed in all) |",
        f"| connect: all subscribed (official slice joining {c['official_joined']}) "
        f"| {c['all_subscribed_s']} s |",
        f"| connect: per process | {', '.join(str(p['connect_s']) for p in c['per_process'])} s |",
        f"| broker RSS per consumer | {b['rss_per_consumer_kib']} KiB |",
        f"| broker CPU per delivery (of it, system) | {b['cpu_us_per_delivery']} µs "
        f"({b.get('system_us_per_delivery')} µs) |",
        f"| deliveries | {d['deliveries']:,} of {d['expected']:,} in {d['window_s']} s "
        f"({d['deliveries_per_s']}/s) |",
        f"| every consumer got everything once, in order | {d[CORRECT]} |",
        f"| generator CPU per delivery (lean processes) | {g['lean_cpu_us_per_delivery']} µs |",
    ]
    if probe := c.get("probe"):
        phases = ", ".join(
            f"{name} P50 {p['p50']} / P99 {p['p99']} / max {p['max']} ms ({p['count']})"
            for name, p in probe.items()
            if isinstance(p, dict)
        )
        lines.append(
            f"| probe producer on another topic, send round trip | {phases}; failed {probe['failed_sends']} |"
        )
    if stalled := doc.get("stalled"):
        lines.append(
            f"| stalled ({s['stalled']} %) | {stalled['consumers']:,} consumers got "
            f"{stalled['deliveries']:,} messages (at most {stalled['max_received']} each); "
            f"{stalled['unread_kib']} KiB unread in their sockets at the end |"
        )
    if s["max_message_size"]:
        parts = [doc.get(name) or {} for name in ("lean", "official")]
        chunks = sum((p.get("chunks") or {}).get("chunks", 0) for p in parts)
        lines.append(
            f"| chunked (broker max_message_size {s['max_message_size']:,} B) | {chunks:,} chunks to "
            f"the lean consumers; faults (abandoned, out of place, wrong size): {d['chunk_faults']} |"
        )
    for name in ("lean", "official"):
        part = doc.get(name)
        if not part:
            continue
        for source, h in part["latency_ms"].items():
            if h["count"]:
                lines.append(
                    f"| {name} latency {source.replace('_', ' ')} | "
                    f"P50 {h['p50']} ms, P99 {h['p99']} ms, max {h['max']} ms |"
                )
    return "\n".join(lines) + "\n"
