"""Ctrl-C as a request to stop, seen between one step of a command's loop and the next.

Python's own SIGINT handling raises KeyboardInterrupt wherever the main thread happens to be:
inside the client (a receive that has just taken a message off the queue, an acknowledgement
half posted to the loop thread) or between acknowledging a message and printing it, which loses
that message. ``stop_on_ctrl_c`` makes the first Ctrl-C set an event that the loop checks after
each step; a step waits at most a poll interval, so the command still ends promptly. A second
Ctrl-C interrupts at once, as usual.

A SIGINT that was ignored when the process started (a background job of a script, ``nohup``)
stays ignored, as Python and Pulsar's Java tools leave it; a handler someone else installed is
left alone too.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


@contextmanager
def stop_on_ctrl_c() -> Iterator[threading.Event]:
    """An event that the first Ctrl-C (SIGINT) sets while the block runs; the handler before it
    is back after the first Ctrl-C and at the end of the block."""
    stop = threading.Event()
    previous = signal.getsignal(signal.SIGINT)
    on_main_thread = threading.current_thread() is threading.main_thread()
    if previous is not signal.default_int_handler or not on_main_thread:
        yield stop  # ignored, someone else's, or not ours to change (only the main thread may)
        return

    def first_ctrl_c(signum: int, frame: FrameType | None) -> None:
        stop.set()
        signal.signal(signal.SIGINT, previous)  # a second Ctrl-C raises KeyboardInterrupt

    signal.signal(signal.SIGINT, first_ctrl_c)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
