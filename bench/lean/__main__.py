"""``python -m bench.lean``: the broadcast load generator's command line."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path

from bench.lean.coordinator import Settings, run
from bench.lean.report import markdown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lean", description=__doc__)
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
    }
    for f in fields(Settings):
        value = getattr(defaults, f.name)
        flag = "--" + f.name.replace("_", "-")
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true", help=helps[f.name])
        elif f.name == "fsync":
            parser.add_argument(flag, choices=["always", "never"], default=value, help=helps[f.name])
        else:
            parser.add_argument(flag, type=type(value), default=value, help=helps[f.name])
    parser.add_argument("--out", type=Path, help="write the JSON document here (and the summary beside, .md)")
    args = parser.parse_args(argv)
    settings = Settings(**{f.name: getattr(args, f.name) for f in fields(Settings)})
    if (
        not 0 <= settings.official <= settings.consumers
        or settings.processes < 1
        or settings.per_connection < 1
    ):
        parser.error("need 0 <= --official <= --consumers, --processes >= 1, --per-connection >= 1")
    doc = run(settings)
    text = json.dumps(doc, indent=2)
    summary = markdown(doc)
    print(text)
    print(summary, file=sys.stderr)
    if args.out is not None:
        args.out.write_text(text + "\n")
        args.out.with_suffix(".md").write_text(summary)
    return 0 if doc["delivery"]["every_consumer_got_everything_once_in_order"] else 1


if __name__ == "__main__":
    sys.exit(main())
