"""The blocking client's event loop: a thread running it, and the calls posted to it in order.

``ClientLoop`` is what the blocking facades (producer, consumer, reader, column reader) use of
their client: run a coroutine there and wait, post a plain call without waiting, the listener
thread, and whether the loop is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from magnetar.client import errors

log = logging.getLogger(__name__)
R = TypeVar("R")


class _LoopThread:
    """An event loop running for ever on a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="magnetar-client-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        if threading.current_thread() is self._thread:
            coro.close()
            self.check_thread()
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def check_thread(self) -> None:
        if threading.current_thread() is self._thread:
            raise RuntimeError("blocking client call made on the client's own loop thread (from a callback?)")

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()


class _Mailbox:
    """Plain calls from callers' threads to the loop thread, run there in the order posted.

    ``call_soon_threadsafe`` per call would wake the loop (a write to its self-pipe) once per
    message; a burst of posts made before the loop gets to them shares one wake-up.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._calls: list[tuple[Callable[..., object], tuple[Any, ...]]] = []

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        with self._lock:
            self._calls.append((fn, args))
            if len(self._calls) > 1:
                return  # a run is scheduled and has not taken the list yet
        try:
            self._loop.call_soon_threadsafe(self._run)
        except RuntimeError:  # the loop is closed
            with self._lock:
                self._calls.clear()
            raise errors.AlreadyClosed("the client is closed") from None

    def _run(self) -> None:
        with self._lock:
            calls, self._calls = self._calls, []
        for fn, args in calls:
            try:
                fn(*args)
            except Exception:
                log.exception("posted client call %r failed", fn)


#: On a listener thread, the ``ClientLoop`` whose thread it is.
_LISTENER_OF = threading.local()


def _mark_listener_thread(client_loop: ClientLoop) -> None:
    _LISTENER_OF.client_loop = client_loop


class ClientLoop:
    """The loop thread, its mailbox and the listener thread of one blocking client."""

    def __init__(self) -> None:
        self._thread = _LoopThread()
        self._mailbox = _Mailbox(self._thread.loop)
        #: Listeners run here, one at a time, never on the loop thread.
        self.listeners = concurrent.futures.ThreadPoolExecutor(
            1,
            thread_name_prefix="magnetar-listener",
            initializer=_mark_listener_thread,
            initargs=(self,),
        )

    def on_listener_thread(self) -> bool:
        """Whether the caller is this client's listener thread (work it submits waits behind it)."""
        return getattr(_LISTENER_OF, "client_loop", None) is self

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._thread.loop

    def is_closed(self) -> bool:
        return self._thread.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, R]) -> R:
        """Run ``coro`` on the loop and wait for its result (not from the loop thread)."""
        return self._thread.run(coro)

    def check_thread(self) -> None:
        """Raise when called on the loop thread, where waiting for the loop would hang."""
        self._thread.check_thread()

    def post(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon, after everything posted before, without waiting."""
        self._thread.check_thread()
        self._mailbox.post(fn, *args)

    def stop(self) -> None:
        self.listeners.shutdown(wait=False)
        self._thread.stop()
