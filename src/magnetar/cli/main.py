"""The ``magnetar`` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from magnetar import __version__
from magnetar.cli import config_show, repair, tokens
from magnetar.demo.smart_city import cli as smart_city


def _standalone_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("standalone", help="run a broker in the foreground")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="binary protocol port (default 6650; 0 picks a free one)")
    p.add_argument("--http-port", type=int, help="HTTP admin port (default 8080; 0 picks a free one)")
    p.add_argument(
        "--broker-service-port-enabled",
        action=argparse.BooleanOptionalAction,
        help="serve the plain binary protocol on --port (default on; off: pulsar+ssl:// only)",
    )
    p.add_argument(
        "--web-service-port-enabled",
        action=argparse.BooleanOptionalAction,
        help="serve plain HTTP on --http-port (default on; off: HTTPS only)",
    )
    p.add_argument("--data-dir", type=Path, help="where ledgers and metadata live (default ./data)")
    p.add_argument("--config", type=Path, help="TOML file with settings (see docs/configuration.md)")
    p.add_argument("--log-level", default="INFO")


def _event_loop_runner():
    try:
        import uvloop

        return uvloop.run
    except ImportError:
        return asyncio.run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="magnetar", description="Magnetar, a small Pulsar-compatible broker"
    )
    parser.add_argument("--version", action="version", version=f"magnetar {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _standalone_parser(sub)
    repair.add_parser(sub)
    tokens.add_parser(sub)
    config_show.add_parser(sub)
    smart_city.add_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "standalone":
        from magnetar.cli import standalone  # the broker's modules, for this command only

        return _event_loop_runner()(standalone.run(args))
    if args.command == "repair":
        return repair.run(args)
    if args.command == "tokens":
        return tokens.run(args)
    if args.command == "config":
        return config_show.run(args)
    if args.command == "smart-city":
        return smart_city.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
