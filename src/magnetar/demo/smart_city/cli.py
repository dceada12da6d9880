"""``magnetar smart-city`` and ``python -m magnetar.demo.smart_city``."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys

from magnetar.demo.smart_city.settings import CitySettings

DESCRIPTION = (
    "Play a smart city against an embedded broker: vehicles, sensors and cameras publish telemetry and "
    "large frames, a Spark Structured Streaming pipeline detects road damage per area and writes alerts, "
    "and every vehicle in the area receives them. Ends with a summary."
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser("smart-city", help="run the smart-city demo job", description=DESCRIPTION)
    CitySettings.add_arguments(parser)
    parser.add_argument("--log-level", default="WARNING")
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        settings = CitySettings.from_args(args)
    except ValueError as exc:
        print(f"magnetar smart-city: {exc}", file=sys.stderr)
        return 2
    try:
        import pyspark  # noqa: F401
    except ImportError:
        print(
            "magnetar smart-city needs the spark extra: pip install -e '.[spark]' (and Java 17)",
            file=sys.stderr,
        )
        return 2
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        print("magnetar smart-city needs Java 17 for Spark (java on the PATH, or JAVA_HOME)", file=sys.stderr)
        return 2
    from magnetar.demo.smart_city.job import run_job

    return 0 if run_job(settings).ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m magnetar.demo.smart_city", description=DESCRIPTION)
    CitySettings.add_arguments(parser)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    return run(args)
