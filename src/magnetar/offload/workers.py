"""Worker threads for uploads and range reads that never hold up the broker's exit.

``concurrent.futures.ThreadPoolExecutor`` joins its threads when the interpreter exits, so an
upload blocked on a store that stopped answering would keep a stopped broker alive until the
store's timeout (and its retries) ran out. These threads are daemons: ``shutdown`` stops taking
work and waits a bounded time for what runs; whatever is still inside a request then is
abandoned with the process, and an upload abandoned so is one that never counted (its attempt
is given up when its managed ledger next opens: docs/tiered-storage.md).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_STOP = object()


class DaemonWorkers:
    """``count`` daemon threads running submitted work in order of submission."""

    def __init__(self, count: int, name: str) -> None:
        self._work: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._busy = 0
        self._idle = threading.Condition()
        self._threads = [
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True) for n in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, work: Callable[..., Any], *args: Any) -> Future:
        """Run ``work(*args)`` on a worker; its Future. RuntimeError once shut down."""
        if self._closed:
            raise RuntimeError("the offload workers are shut down")
        future: Future = Future()
        self._work.put((future, work, args))
        return future

    def shutdown(self, wait_seconds: float) -> bool:
        """Take no more work, drop what has not started, and wait up to ``wait_seconds`` for what
        runs; True when nothing runs any more."""
        self._closed = True
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                item[0].cancel()
        for _ in self._threads:
            self._work.put(_STOP)
        deadline = time.monotonic() + wait_seconds
        with self._idle:
            while self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            future, work, args = item
            if not future.set_running_or_notify_cancel():
                continue
            with self._idle:
                self._busy += 1
            try:
                result = work(*args)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            finally:
                with self._idle:
                    self._busy -= 1
                    self._idle.notify_all()
