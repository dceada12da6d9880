"""A message_listener for tests: it keeps what it is handed and says when it has enough."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def collecting_listener(
    n: int, ack: bool = True
) -> tuple[list[bytes], threading.Event, Callable[[Any, Any], None]]:
    """(data seen in order, an event set once ``n`` arrived, the listener); it acknowledges each."""
    seen: list[bytes] = []
    done = threading.Event()

    def listener(consumer: Any, msg: Any) -> None:
        seen.append(msg.data())
        if ack:
            consumer.acknowledge(msg)
        if len(seen) == n:
            done.set()

    return seen, done, listener
