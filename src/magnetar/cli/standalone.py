"""``magnetar standalone``: a broker and its HTTP port in one process (its options: ``main.py``).

The process is where the layers meet: ``Standalone`` starts the broker (``magnetar.broker``)
and then the admin API over it (``magnetar.admin``), and stops them in the reverse order. The
broker knows nothing of HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
from typing import Any

from magnetar import __version__, spread
from magnetar.admin.http import AdminServer
from magnetar.broker import server, startup
from magnetar.broker.config import BrokerConfig
from magnetar.broker.data_dir_lock import DataDirError
from magnetar.broker.descriptors import raise_soft_limit
from magnetar.broker.ownership import OwnershipStore
from magnetar.broker.service import BrokerService
from magnetar.broker.startup import BrokerSetup
from magnetar.broker.worker_role import WorkerRole
from magnetar.broker_process import listening_addresses
from magnetar.cli.failures import one_line
from magnetar.replication.manager import ReplicationManager
from magnetar.storage.errors import MetadataMissingError
from magnetar.websocket.sessions import owner_sessions

log = logging.getLogger("magnetar")


class Standalone:
    """A ``BrokerService``, its ``AdminServer`` and its geo-replication (``ReplicationManager``),
    started and stopped together (in this process: the command below, and tests that want a
    broker without a child process)."""

    def __init__(
        self,
        config: BrokerConfig | BrokerSetup,
        ownership: OwnershipStore | None = None,
        worker: WorkerRole | None = None,
    ) -> None:
        """``config``: checked and built at start-up (``startup.load``), or settings to check here;
        ``ownership`` and ``worker``: as ``BrokerService``'s (one of a supervisor's workers)."""
        setup = config if isinstance(config, BrokerSetup) else startup.prepare(config)
        self.config = setup.config
        self.broker = BrokerService(setup, ownership, worker)
        if worker is not None:  # MQTT reaches the topics other workers own through sessions to them
            self.broker.owner_sessions = owner_sessions(self.broker)
        self.admin = AdminServer(self.broker)
        self.replication = ReplicationManager(self.broker)
        spread.install(self.broker)  # followers reach owners with the client (with workers)

    async def start(self) -> None:
        """Start the broker, then its HTTP port and replication; if that fails, the broker is
        stopped again."""
        await server.start(self.broker)
        try:
            await self.admin.start()
            self.broker.join(*self.admin.web_urls())
            await self.replication.start()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop serving clients, stop replicating and answering HTTP, then stop the broker (cursors,
        storage). Connections go first: while replicators and the HTTP server wind down (seconds at
        worst), producers would otherwise go on storing messages."""
        self.broker.stop_serving()
        await self.replication.stop()
        await self.admin.stop()
        await self.broker.stop()

    def listening(self) -> str:
        """The addresses served, as the ``listening on`` line names them (broker_process.py)."""
        b, a = self.broker, self.admin
        return listening_addresses(
            self.config.host, b.port, a.http_port, b.tls_port, a.https_port, b.mqtt_port, b.mqtts_port
        )


def tune_gc() -> None:
    """The broker makes many short-lived objects per message and few cycles: move what start-up
    built out of the collector's way and collect the young generation less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


#: What a user can get wrong at start-up (a setting, a file, a port, the data directory): said in one
#: line, exit 1. Anything else is a bug, and keeps its traceback.
START_FAILURES = (ValueError, OSError, DataDirError, MetadataMissingError)


def cannot_start(exc: BaseException) -> int:
    """One line on standard error, as docs/cli.md promises (the traceback only at DEBUG)."""
    log.debug("start-up failed", exc_info=exc)
    log.error("cannot start: %s", one_line(exc))
    return 1


def load_setup(args: argparse.Namespace, **more: Any) -> BrokerSetup:
    """The settings of ``magnetar standalone``'s command line (and ``more`` over them)."""
    return startup.load(
        args.config,
        os.environ,
        **{
            "host": args.host,
            "port": args.port,
            "http_port": args.http_port,
            "mqtt_port": args.mqtt_port,
            "mqtts_port": args.mqtts_port,
            "data_dir": args.data_dir,
            "broker_service_port_enabled": args.broker_service_port_enabled,
            "web_service_port_enabled": args.web_service_port_enabled,
            "workers": args.workers,
            **more,
        },
    )


async def run(args: argparse.Namespace) -> int:
    """Run until SIGTERM or SIGINT; 1 when the broker cannot start. With more than one worker,
    this process is their supervisor (supervisor.py)."""
    try:
        setup = load_setup(args)
    except START_FAILURES as exc:  # a setting that cannot work (TLS, authentication ...): say which
        return cannot_start(exc)
    if setup.config.worker_count() > 1:
        from magnetar.cli.supervisor import Supervisor

        return await Supervisor(args, setup).run()
    soft, hard = raise_soft_limit()
    log.info("file descriptor limit %d (hard limit %d)", soft, hard)
    standalone = Standalone(setup)
    config = setup.config
    try:
        await standalone.start()
    except START_FAILURES as exc:  # TlsConfigError is a ValueError, listener.ListenError an OSError
        code = cannot_start(exc)  # said first: a stop that hangs or fails must not hide why
        await standalone.stop()
        return code
    tune_gc()
    log.info(
        "Magnetar %s listening on %s, data in %s",  # broker_process.parse_listening reads it
        __version__,
        standalone.listening(),
        config.data_dir,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    await standalone.stop()
    log.info("stopped cleanly")
    return 0
