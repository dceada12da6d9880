"""The ``magnetar`` command."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import sys
from pathlib import Path

from magnetar import __version__
from magnetar.cli import repair, tokens
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


def _tune_gc() -> None:
    """The broker makes many short-lived objects per message and few cycles: move what start-up
    built out of the collector's way and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


async def _run_standalone(args: argparse.Namespace) -> int:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.data_dir_lock import DataDirInUse
    from magnetar.broker.service import BrokerService
    from magnetar.broker.tls import TlsConfigError
    from magnetar.broker_process import listening_addresses
    from magnetar.storage.errors import MetadataMissingError

    try:
        config = BrokerConfig.load(
            args.config,
            host=args.host,
            port=args.port,
            http_port=args.http_port,
            data_dir=args.data_dir,
            broker_service_port_enabled=args.broker_service_port_enabled,
            web_service_port_enabled=args.web_service_port_enabled,
        )
    except (ValueError, OSError) as exc:  # a setting that cannot work (TLS, authentication ...): say which
        logging.getLogger("magnetar").error("cannot start: %s", exc)
        return 1
    from magnetar.broker.descriptors import raise_soft_limit

    soft, hard = raise_soft_limit()
    logging.getLogger("magnetar").info("file descriptor limit %d (hard limit %d)", soft, hard)
    service = BrokerService(config)
    try:
        await service.start()
    except (DataDirInUse, MetadataMissingError, TlsConfigError) as exc:
        logging.getLogger("magnetar").error("%s", exc)
        await service.stop()
        return 1
    _tune_gc()
    logging.getLogger("magnetar").info(
        "Magnetar %s listening on %s, data in %s",  # broker_process.parse_listening reads it
        __version__,
        listening_addresses(
            config.host, service.port, service.http_port, service.tls_port, service.https_port
        ),
        config.data_dir,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    logging.getLogger("magnetar").info("shutting down")
    await service.stop()
    logging.getLogger("magnetar").info("stopped cleanly")
    return 0


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
    smart_city.add_parser(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.command == "standalone":
        return _event_loop_runner()(_run_standalone(args))
    if args.command == "repair":
        return repair.run(args)
    if args.command == "tokens":
        return tokens.run(args)
    if args.command == "smart-city":
        return smart_city.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
