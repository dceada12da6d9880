"""What both jobs (job.py, district_job.py) run on: the broker settings they share, the loop
thread their asyncio parts run on, and how they connect a client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from magnetar.client import aio
from magnetar.client.errors import ServerError
from magnetar.demo.smart_city.security import ClientOptions

R = TypeVar("R")

BROKER_SETTINGS: dict[str, object] = {
    "deduplication_enabled": True,  # the magnetar sink's exactly-once rests on it
    "keepalive_interval_seconds": 0,  # a busy 2-core machine can be slow to answer a PING
}


def broker_settings(workers: int) -> dict[str, object]:
    """The embedded brokers' settings, run as ``workers`` processes each."""
    return {**BROKER_SETTINGS, "workers": workers}


class LoopThread:
    """An asyncio loop on a daemon thread; ``run`` waits for a coroutine, ``submit`` does not."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="smart-city-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, R]) -> concurrent.futures.Future[R]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, R], timeout: float | None = 60.0) -> R:
        return self.submit(coro).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


async def connect(service_url: str, options: ClientOptions | None = None) -> aio.Client:
    """Our asyncio client (made on the loop it will run on), with a role's ``options`` if secured."""
    return aio.Client(service_url, operation_timeout_seconds=30, **(options or {}))


async def try_subscribe(client: aio.Client, topic: str, subscription: str) -> ServerError | str:
    """What subscribing got: the error the broker answered, or "subscribed" (then unsubscribed)."""
    try:
        consumer = await client.subscribe(topic, subscription, consumer_type=aio.ConsumerType.Exclusive)
    except ServerError as exc:
        return exc
    await consumer.close()
    return "subscribed"
