"""``magnetar standalone --workers N``: the supervisor of N broker processes on one data directory.

What only one process may do, it does once, before any worker starts: it holds the data
directory's lock (``broker.lock``, for the whole broker), checks the storage's directories and
brings the metadata store up to date, empties ``ownership.sqlite`` (owners left by a previous run
are stale), and binds the advertised ports with SO_REUSEPORT without listening, so that they are
the workers' (port 0 picked here) from the first worker's start to the last one's stop. Each
worker inherits the lock's descriptor, so the data directory stays locked until every worker has
exited, even when the supervisor is killed with -9 (its workers then get SIGTERM and flush first:
worker.py); a new broker on the same directory cannot start while an old worker still writes. Then it
starts the workers (``python -m magnetar standalone --worker ...``, worker.py), logs the
``listening on`` line once every worker is serving, and restarts a worker that dies, after ending
its session in the ownership store so that its bundles go to the live workers at once. SIGTERM or
SIGINT stops every worker with SIGTERM (each closes its connections and flushes); a worker that
cannot start stops the broker with one line and exit code 1.

Processes rather than threads: one event loop per core is what workers are for (the GIL).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import time
from typing import Any

from magnetar import __version__
from magnetar.broker.data_dir_lock import DataDirLock
from magnetar.broker.listener import reserve
from magnetar.broker.namespace_service import BUNDLE_PATH
from magnetar.broker.ownership_sqlite import SqliteOwnership
from magnetar.broker.resources import BrokerResources
from magnetar.broker.startup import BrokerSetup
from magnetar.broker.worker_role import WorkerRole
from magnetar.broker_process import listening_addresses
from magnetar.cli.standalone import START_FAILURES, cannot_start
from magnetar.storage.store import Storage

log = logging.getLogger("magnetar")

#: How long a worker may take to say that it serves (it opens storage and binds its ports).
WORKER_START_TIMEOUT_S = 60.0
#: How long stopping workers may take to flush and exit before they are killed (below
#: broker_process.STOP_TIMEOUT_S, so that the supervisor itself exits in time).
WORKER_STOP_TIMEOUT_S = 15.0
#: A worker that died within this of its start counts as failing again: its next start waits longer.
QUICK_DEATH_S = 10.0
MAX_RESTART_DELAY_S = 10.0


class WorkerFailed(RuntimeError):
    """A worker could not start: its own one-line reason."""


class Supervisor:
    """Runs ``config.worker_count()`` workers until SIGTERM or SIGINT (see the module's docstring)."""

    def __init__(self, args: argparse.Namespace, setup: BrokerSetup) -> None:
        self.args = args
        self.config = setup.config
        self.count = self.config.worker_count()
        self._lock = DataDirLock(self.config.data_dir)
        self._reserved: list[socket.socket] = []
        #: The advertised ports as bound (None: not served), given to every worker.
        self.ports: dict[str, int | None] = {}
        self._workers: dict[int, asyncio.subprocess.Process] = {}
        self._started_at: dict[int, float] = {}
        self._ownership: SqliteOwnership | None = None
        self._stopping = False
        self._tasks: set[asyncio.Task[Any]] = set()

    async def run(self) -> int:
        try:
            self._prepare()
        except START_FAILURES as exc:
            self._release()
            return cannot_start(exc)
        results = await asyncio.gather(*(self._start(i) for i in range(self.count)), return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self._stop_all()
            self._release()
            return cannot_start(failures[0])
        config = self.config
        addresses = listening_addresses(
            config.host,
            self.ports["port"],
            self.ports["http_port"],
            self.ports["broker_service_port_tls"],
            self.ports["web_service_port_tls"],
            self.ports["mqtt_port"],
            self.ports["mqtts_port"],
        )
        log.info(  # broker_process.parse_listening reads it
            "Magnetar %s listening on %s, data in %s (%d workers)",
            __version__,
            addresses,
            config.data_dir,
            self.count,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        for index in range(self.count):
            self._spawn(self._watch(index))
        await stop.wait()
        log.info("shutting down %d workers", self.count)
        code = await self._stop_all()
        self._release()
        if code == 0:
            log.info("stopped cleanly")
        return code

    # -- before the workers ---------------------------------------------------------------------------
    def _prepare(self) -> None:
        """The data directory's lock, the storage's check, fresh ownership, the shared ports."""
        config = self.config
        self._lock.acquire()
        storage = Storage(config.storage_config())  # _check_directories, the schema brought up to date
        try:
            BrokerResources.open(storage, config.cluster_name, config.default_number_of_namespace_bundles)
        finally:
            storage.close()
        SqliteOwnership.reset(config.data_dir)
        self._ownership = SqliteOwnership.in_data_dir(config.data_dir)
        plain, web = config.broker_service_port_enabled, config.web_service_port_enabled
        wanted = {
            "port": (config.port if plain else None, "binary protocol port (--port)"),
            "http_port": (config.http_port if web else None, "HTTP port (--http-port)"),
            "broker_service_port_tls": (config.broker_service_port_tls, "TLS port (broker_service_port_tls)"),
            "web_service_port_tls": (config.web_service_port_tls, "HTTPS port (web_service_port_tls)"),
            # Served by every worker (broker/mqtt/server.py), on the port reserved here for all of them.
            "mqtt_port": (config.mqtt_port, "MQTT port (--mqtt-port)"),
            "mqtts_port": (config.mqtts_port, "MQTT TLS port (--mqtts-port)"),
        }
        for name, (port, setting) in wanted.items():
            if port is None:
                self.ports[name] = None
                continue
            sockets = reserve(config.host, port, setting)
            self._reserved += sockets
            self.ports[name] = int(sockets[0].getsockname()[1])

    def _release(self) -> None:
        for sock in self._reserved:
            sock.close()
        self._reserved.clear()
        if self._ownership is not None:
            self._ownership.close()
            self._ownership = None
        self._lock.release()

    # -- workers --------------------------------------------------------------------------------------
    def _command(self, index: int) -> list[str]:
        """``python -m magnetar standalone`` with the supervisor's options, as worker ``index``."""
        args = self.args
        role = {
            "index": index,
            "parent": os.getpid(),
            # The ports as bound, and how many workers there are (every_worker.py asks each one).
            "settings": {
                **{name: port for name, port in self.ports.items() if port is not None},
                "workers": self.count,
            },
        }
        cmd = [sys.executable, "-m", "magnetar", "standalone", "--worker", json.dumps(role)]
        cmd += ["--data-dir", str(self.config.data_dir), "--host", self.config.host]
        if args.config is not None:
            cmd += ["--config", str(args.config)]
        for flag in ("broker_service_port_enabled", "web_service_port_enabled"):
            value = getattr(args, flag)
            if value is not None:
                cmd.append(f"--{'' if value else 'no-'}{flag.replace('_', '-')}")
        cmd += ["--log-level", args.log_level]
        return cmd

    async def _start(self, index: int) -> None:
        """Start worker ``index`` and wait until it serves; WorkerFailed with its reason if not."""
        broker_id = WorkerRole(index).broker_id
        proc = await asyncio.create_subprocess_exec(
            *self._command(index),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            pass_fds=(self._lock.fileno(),),  # the lock outlives the supervisor until the worker exits
        )
        self._workers[index] = proc
        self._started_at[index] = time.monotonic()
        assert proc.stdout is not None
        try:
            said = await asyncio.wait_for(_first_report(proc.stdout), WORKER_START_TIMEOUT_S)
        except TimeoutError:
            said = {"error": f"it did not serve within {WORKER_START_TIMEOUT_S:.0f} s"}
        if "ready" not in said:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            reason = said.get("error") or f"it exited with {proc.returncode} before serving"
            raise WorkerFailed(f"{broker_id}: {reason}")
        self._spawn(_drain(proc.stdout))

    async def _watch(self, index: int) -> None:
        """Start worker ``index`` again whenever it dies, until the broker stops."""
        failures = 0
        while True:
            proc = self._workers[index]
            code = await proc.wait()
            if self._stopping:
                return
            broker_id = WorkerRole(index).broker_id
            quick = time.monotonic() - self._started_at[index] < QUICK_DEATH_S
            failures = failures + 1 if quick else 0
            delay = min(MAX_RESTART_DELAY_S, 0.5 * (2 ** (failures - 1))) if failures > 1 else 0.0
            log.warning("%s (pid %d) exited with %s; starting it again", broker_id, proc.pid, code)
            if self._ownership is not None:  # its bundles go to the live workers now, not at lease end
                self._ownership.unregister(broker_id)
                self._ownership.publish_change(f"{BUNDLE_PATH}s")  # they resume its replication
            await asyncio.sleep(delay)
            if self._stopping:
                return
            try:
                await self._start(index)
            except WorkerFailed as exc:
                log.error("cannot restart %s", exc)

    async def _stop_all(self) -> int:
        """SIGTERM every worker, wait for them (kill past the timeout); 1 if one did not stop cleanly."""
        self._stopping = True
        procs = [p for p in self._workers.values() if p.returncode is None]
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        code = 0
        for proc in procs:
            try:
                if await asyncio.wait_for(proc.wait(), WORKER_STOP_TIMEOUT_S) != 0:
                    code = 1
            except TimeoutError:
                log.error("worker pid %d did not stop within %.0f s: killed", proc.pid, WORKER_STOP_TIMEOUT_S)
                proc.kill()
                await proc.wait()
                code = 1
        for task in list(self._tasks):
            task.cancel()
        return code

    def _spawn(self, work: Any) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


async def _first_report(stream: asyncio.StreamReader) -> dict[str, Any]:
    """The worker's first report (worker.py); ``{}`` if it closed its output without one."""
    while line := await stream.readline():
        with contextlib.suppress(ValueError):
            said = json.loads(line)
            if isinstance(said, dict) and ("ready" in said or "error" in said):
                return said
    return {}


async def _drain(stream: asyncio.StreamReader) -> None:
    """Read what a worker writes after its report, so that it never blocks on a full pipe."""
    while await stream.readline():
        pass
