"""The large-frame verifier: a consumer that checks every frame byte for byte.

Frames arrive as chunked messages and are reassembled by our client; the verifier hashes
each one and compares the SHA-256 and the size with those its camera put in the properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from dataclasses import dataclass, field

from magnetar.client import aio
from magnetar.demo.smart_city.settings import CitySettings


@dataclass(frozen=True, slots=True)
class FrameCheck:
    index: int
    camera: str
    size: int
    intact: bool
    road_damage: bool
    latency_ms: int  # from the frame's event time to its full arrival


@dataclass
class FrameVerifier:
    settings: CitySettings
    client: aio.Client
    checks: list[FrameCheck] = field(default_factory=list)
    _task: asyncio.Task | None = None

    @property
    def intact(self) -> int:
        return sum(1 for c in self.checks if c.intact)

    @property
    def corrupt(self) -> int:
        return len(self.checks) - self.intact

    @property
    def bytes_intact(self) -> int:
        return sum(c.size for c in self.checks if c.intact)

    async def start(self) -> None:
        consumer = await self.client.subscribe(
            self.settings.frames_topic,
            "frame-verifier",
            consumer_type=aio.ConsumerType.Exclusive,
            initial_position=aio.InitialPosition.Earliest,
            receiver_queue_size=8,  # chunks of up to 5 MiB each: keep the queue short
        )
        self._task = asyncio.create_task(self._loop(consumer))

    async def _loop(self, consumer: aio.Consumer | aio.MultiTopicsConsumer) -> None:
        while True:
            msg = await consumer.receive()
            arrived_ms = int(time.time() * 1000)
            data, props = msg.data(), msg.properties()
            digest = await asyncio.to_thread(_sha256_hex, data)
            self.checks.append(
                FrameCheck(
                    index=int(props.get("frame-index", -1)),
                    camera=props.get("camera", "?"),
                    size=len(data),
                    intact=digest == props.get("sha256") and str(len(data)) == props.get("size"),
                    road_damage=props.get("road-damage") == "true",
                    latency_ms=arrived_ms - msg.event_timestamp(),
                )
            )
            await consumer.acknowledge(msg)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
