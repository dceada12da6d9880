"""What ``perf produce`` and ``perf consume`` share: the asyncio client, when a run stops, and the
line printed every interval.

A run stops at the first of: its ``-time`` limit, its ``-m`` message limit (the command's own
tasks end), or Ctrl-C. The first Ctrl-C only asks the run to stop, so the outstanding messages are
settled and the summary printed (exit 0); a second one interrupts at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import click

from magnetar.cli.connection import Connection, client_errors
from magnetar.cli.perf.report import Recorder, Window
from magnetar.client.aio import Client

T = TypeVar("T")


def run_options(verb: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The flags of a run that both commands take (pulsar-perf's names): topics, limits, the
    printing interval and ``--quiet``; ``verb`` says what ``-m`` counts ("send", "receive")."""
    options = (
        click.option(
            "-t",
            "--num-topics",
            "--num-topic",
            "num_topics",
            default=1,
            show_default=True,
            type=click.IntRange(min=1),
            help="Topics per TOPIC given: TOPIC-0, TOPIC-1, ... when more than 1.",
        ),
        click.option(
            "-m",
            "--num-messages",
            default=0,
            show_default=True,
            type=click.IntRange(min=0),
            help=f"Messages to {verb} in all; 0: no limit.",
        ),
        click.option(
            "-time",
            "--test-duration",
            "duration",
            default=0.0,
            show_default=True,
            type=click.FloatRange(min=0),
            help="Seconds to run; 0: no limit.",
        ),
        click.option(
            "-i",
            "--stats-interval-seconds",
            "interval",
            default=10.0,
            show_default=True,
            type=click.FloatRange(min=0.1),
            help="Seconds between printed lines.",
        ),
        click.option("--quiet", is_flag=True, help="Print only the summary at the end."),
    )

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def run_with_client(connection: Connection, body: Callable[[Client], Coroutine[Any, Any, T]]) -> T:
    """Run ``body(client)`` on a new event loop with an asyncio client, closed on the way out;
    client errors become one ``Error: ...`` line and exit code 1."""
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)

    async def main() -> T:
        client = Client(connection.service_url, **connection.client_options())
        try:
            return await body(client)
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    with client_errors(connection.service_url):
        return asyncio.run(main())


class Run:
    """A run's clock, its stop signal and its periodic report."""

    def __init__(self, interval: float, duration: float, line: Callable[[Window], str], quiet: bool) -> None:
        self.loop = asyncio.get_running_loop()
        self.stop = asyncio.Event()
        self.recorder = Recorder(self.loop.time())
        self._interval = interval
        self._line = line
        self._quiet = quiet
        if duration > 0:
            self.loop.call_later(duration, self.stop.set)
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers off the main thread
            self.loop.add_signal_handler(signal.SIGINT, self._interrupted)

    def _interrupted(self) -> None:
        self.stop.set()
        self.loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C interrupts at once

    def now(self) -> float:
        return self.loop.time()

    async def sleep_until(self, when: float) -> bool:
        """Wait until loop time ``when``, in short steps so a stop is seen; False if stopped."""
        while not self.stop.is_set():
            wait = when - self.loop.time()
            if wait <= 0:
                return True
            await asyncio.sleep(min(wait, 0.2))
        return False

    async def report_every_interval(self) -> None:
        """Print a window's line every interval, on due times (a slow print does not drift)."""
        ticks = 1
        while True:
            await asyncio.sleep(max(0.0, self.recorder.started + ticks * self._interval - self.now()))
            ticks += 1
            window = self.recorder.take_window(self.now())
            if not self._quiet:
                click.echo(self._line(window))

    async def until_done(self, work: asyncio.Future[Any]) -> None:
        """Report every interval until ``work`` ends or the run is stopped, whichever comes
        first; the run is stopped on the way out. What is left of ``work`` is the caller's."""
        stop_task = asyncio.ensure_future(self.stop.wait())
        reporter = asyncio.ensure_future(self.report_every_interval())
        try:
            await asyncio.wait([work, stop_task], return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.stop.set()
            stop_task.cancel()
            reporter.cancel()
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                self.loop.remove_signal_handler(signal.SIGINT)
