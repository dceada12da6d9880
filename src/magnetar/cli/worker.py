"""One worker of ``magnetar standalone --workers N``: a broker that its supervisor started
(supervisor.py) with the hidden ``--worker`` option.

It serves as ``Standalone`` does, but as worker ``i`` (``broker/worker_role.py``): bundle owners in
the shared ``ownership.sqlite``, the advertised ports shared with the other workers and ports of its
own. It tells its supervisor on standard output, one JSON line, that it is ready (``{"ready": id}``)
or why it cannot start (``{"error": reason}``: the supervisor says it, once, for the whole broker).
It stops on SIGTERM only: a terminal's SIGINT reaches every process of the group, and the
supervisor, not each worker, decides that the broker stops. It also stops when its supervisor dies
(the parent-death signal), so that no worker outlives a supervisor killed with -9, and flushes as
on SIGTERM. It holds the data directory's lock, inherited from the supervisor (an open descriptor of
``broker.lock``), until it exits: a broker started anew on the directory waits for every old worker.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import logging
import os
import signal
import sys
from typing import Any

from magnetar.broker.descriptors import raise_soft_limit
from magnetar.broker.ownership_sqlite import SqliteOwnership
from magnetar.broker.worker_role import WorkerRole
from magnetar.cli.failures import one_line
from magnetar.cli.standalone import START_FAILURES, Standalone, load_setup, tune_gc

log = logging.getLogger("magnetar")

#: prctl's PR_SET_PDEATHSIG (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


def report(message: dict[str, Any]) -> None:
    """One line for the supervisor (it reads the worker's standard output)."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def stop_with_parent(parent: int) -> None:
    """SIGTERM this process when its parent (the supervisor) dies; if it is gone already, now."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the supervisor's own SIGTERM still stops it
        log.debug("no parent-death signal on this system")
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


async def run(args: argparse.Namespace, role: dict[str, Any]) -> int:
    """Serve as worker ``role["index"]`` until SIGTERM; 1 when it cannot start (said on stdout)."""
    worker = WorkerRole(int(role["index"]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop_with_parent(int(role["parent"]))
    try:
        setup = load_setup(args, **role["settings"])
    except START_FAILURES as exc:
        report({"error": one_line(exc)})
        return 1
    raise_soft_limit()
    ownership = SqliteOwnership.in_data_dir(setup.config.data_dir)
    standalone = Standalone(setup, ownership, worker)
    try:
        await standalone.start()
    except START_FAILURES as exc:
        log.debug("start-up failed", exc_info=exc)
        await standalone.stop()
        ownership.close()
        report({"error": one_line(exc)})
        return 1
    tune_gc()
    log.info("%s (pid %d) serving on %s", worker.broker_id, os.getpid(), standalone.listening())
    report({"ready": worker.broker_id})
    await stop.wait()
    if os.getppid() != int(role["parent"]):
        log.warning("%s: its supervisor (pid %s) is gone; stopping", worker.broker_id, role["parent"])
    log.info("%s shutting down", worker.broker_id)
    await standalone.stop()
    ownership.close()
    log.info("%s stopped cleanly", worker.broker_id)
    return 0
