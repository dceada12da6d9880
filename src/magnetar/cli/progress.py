"""A live count-and-rate line on standard error while a long command runs.

``produce``, ``consume`` and ``read`` (and later ``perf`` and admin) open one with
``live_progress(...)`` and call ``advance(n)`` as work is done. It is drawn only when standard
error is a terminal and ``--quiet`` was not given: piped or redirected output never holds
control sequences, and a script's standard error stays as before. When it is off the same object
is a no-op, so the commands have one code path.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

#: Redraws a second: enough to look live, cheap next to the work it reports.
REFRESH_PER_SECOND = 4


def progress_wanted(stderr_is_tty: bool, quiet: bool) -> bool:
    """Whether to draw a progress line: only for a person watching a terminal."""
    return stderr_is_tty and not quiet


def rate_text(verb: str, count: int, seconds: float, noun: str = "messages") -> str:
    """The line itself, e.g. ``consumed 1,204 messages  (401.3 msg/s, 3.0 s)``."""
    rate = count / seconds if seconds > 0 else 0.0
    return f"{verb} {count:,} {noun}  ({rate:,.1f} msg/s, {seconds:,.1f} s)"


class Progress:
    """A count that a live line shows; ``advance`` is safe from any thread (client callbacks)."""

    def __init__(self, verb: str, noun: str = "messages") -> None:
        self.verb = verb
        self.noun = noun
        self.count = 0
        self._lock = threading.Lock()
        self._start = time.monotonic()

    def advance(self, n: int = 1) -> None:
        with self._lock:
            self.count += n

    def text(self) -> str:
        return rate_text(self.verb, self.count, time.monotonic() - self._start, self.noun)

    def __rich__(self) -> Text:  # what Live redraws on each refresh
        return Text(self.text())


@contextmanager
def live_progress(
    verb: str, *, quiet: bool = False, noun: str = "messages", stderr: TextIO | None = None
) -> Iterator[Progress]:
    """A ``Progress`` drawn live on standard error while the block runs (when wanted); the line
    is removed at the end, so the command's own summary line follows on a clean terminal."""
    stream = stderr if stderr is not None else sys.stderr
    progress = Progress(verb, noun)
    if not progress_wanted(stream.isatty(), quiet):
        yield progress
        return
    console = Console(file=stream, force_terminal=True)
    # Data lines printed to a terminal stdout go above the live line; a piped stdout is untouched.
    with Live(
        progress,
        console=console,
        refresh_per_second=REFRESH_PER_SECOND,
        transient=True,
        redirect_stdout=sys.stdout.isatty(),
        redirect_stderr=False,
    ):
        yield progress
