"""``python -m bench.lean``: the broadcast load generator's command line.

Modes: ``--mode broadcast`` (one subscription with the broadcast property) or ``exclusive``
(an Exclusive subscription per consumer), against ``--broker magnetar`` or ``pulsar-lite``;
``--stalled PCT`` stalls that share of the lean consumers after one message; ``--max-message-size``
makes the broker's limit small and the producer chunk; ``--compare`` runs broadcast on Magnetar,
exclusive on Magnetar and exclusive on pulsar-lite for each N of ``--sweep`` (or ``--consumers``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from bench.lean import compare
from bench.lean.coordinator import Settings, run
from bench.lean.report import markdown
from bench.lean.target import BROKERS, MODES


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.lean", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Settings()
    helps = {
        "consumers": "consumers in all (official ones included)",
        "processes": "worker processes for the lean consumers",
        "per_connection": "consumers sharing one connection (1: one connection each)",
        "official": "of the consumers, how many go through the official pulsar-client (one more process)",
        "messages": "messages to send",
        "size": "bytes per message",
        "rate": "messages per second",
        "permits": "FLOW permits per consumer (refilled at half)",
        "ack_every": "a cumulative ACK every N messages (and on the last)",
        "concurrency": "connections being set up at once, per process",
        "timeout": "seconds from the first send to wait for every delivery",
        "fsync": "the broker's fsync_policy",
        "official_first": "the official slice subscribes with the lean ones, not after them (the default)",
        "mode": "broadcast: one subscription, broadcast property; exclusive: one Exclusive subscription "
        "per consumer (the peer, not knowing the property, takes broadcast as a plain Exclusive "
        "subscription: it refuses all consumers but one, closing their connections)",
        "broker": "the broker under test, started as bench/brokers.py starts it",
        "stalled": "percent of the lean consumers (whole connections) that stop reading and sending FLOW "
        "after their first message; latency and the all-delivered check are over the others",
        "max_message_size": "set the broker's largest message to BYTES and chunk at the producer "
        "(batching off): --size above it makes each message several chunks, checked whole (0: off)",
        "workers": "the broker's worker processes (magnetar standalone --workers N): with more than one, "
        "the topic is made spread first, so each consumer is served by the worker its connection reached",
        "lookup": "each connection looks the topic up before subscribing, as a client does (a spread "
        "topic's LOOKUP names the port dialled: a Redirect there, then Connect)",
        "no_probe": "no probe producer (by default one sends a small message every 20 ms on another topic "
        "and its round trips are reported before, during the connect storm, and during the deliveries)",
    }
    choices = {"fsync": ["always", "never"], "mode": list(MODES), "broker": list(BROKERS)}
    for f in fields(Settings):
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true", help=helps[f.name])
        elif f.name in choices:
            parser.add_argument(flag, choices=choices[f.name], default=value, help=helps[f.name])
        else:
            parser.add_argument(flag, type=type(value), default=value, help=helps[f.name])
    parser.add_argument("--out", type=Path, help="write the JSON document here (and the summary beside, .md)")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run broadcast/magnetar, exclusive/magnetar and exclusive/pulsar-lite for each N; one table",
    )
    parser.add_argument(
        "--sweep",
        help="with --compare: comma-separated N (default: --consumers); a case that fails stops there",
    )
    args = parser.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    if (
        not 0 <= settings.official <= settings.consumers
        or settings.processes < 1
        or settings.per_connection < 1
        or not 0 <= settings.stalled <= 100
    ):
        parser.error(
            "need 0 <= --official <= --consumers, --processes >= 1, --per-connection >= 1, "
            "0 <= --stalled <= 100"
        )
    if settings.max_message_size and (settings.broker == "pulsar-lite" or args.compare):
        # pulsar-lite 0.2.0 announces no max_message_size in CONNECTED, so the client does not chunk,
        # and the peer then refuses each whole message ("Exceed maximum message size").
        parser.error("--max-message-size needs --broker magnetar (the peer announces no limit to chunk by)")
    if args.compare:
        sweep = [int(n) for n in args.sweep.split(",")] if args.sweep else [settings.consumers]
        doc = compare.compare(settings, sweep)
        return _emit(doc, compare.markdown(doc), args.out, ok=True)
    doc = run(settings)
    return _emit(
        doc, markdown(doc), args.out, ok=doc["delivery"]["every_consumer_got_everything_once_in_order"]
    )


def _emit(doc: dict, summary: str, out: Path | None, ok: bool) -> int:
    text = json.dumps(doc, indent=2)
    print(text)
    print(summary, file=sys.stderr)
    if out is not None:
        out.write_text(text + "\n")
        out.with_suffix(".md").write_text(summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
