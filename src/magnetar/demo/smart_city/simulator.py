"""Plays the planned city in real time: telemetry and large camera frames into the raw topics.

Telemetry (vehicles, sensors, camera detections) is JSON on one partitioned topic, keyed by
area so an area's events stay in one partition, with the device's event time as the
message's event time. Devices send up to ``max_lateness_s`` late, so event times arrive out
of order. Each camera has its own chunking producer for its frames (6-12 MB by default,
above the broker's 5 MiB limit), with the SHA-256 of the frame in the properties.

With ``--mqtt`` the vehicles' readings go over MQTT instead (``mqtt_vehicles.py``), each from
its own vehicle, at QoS 1 into the partition its area's key routes to; a reading counts as sent
once PUBACKed, so the closing ticks follow every stored reading, as they follow the gateway's.

Clock *ticks* (one per partition, area "") move the pipeline's watermark: before the traffic
starts, a tick in the past lets the pipeline run its first (slow) micro-batch; when the
traffic stops, a tick past the last window plus the watermark delay closes every window.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.client import aio
from magnetar.client.message import MessageId
from magnetar.demo.smart_city.city import TICK, VEHICLE, City, FramePlan
from magnetar.demo.smart_city.settings import CitySettings
from magnetar.demo.smart_city.vehicle_state import VehicleState
from magnetar.protocol.key_hash import key_partition

log = logging.getLogger(__name__)


@dataclass
class SimulatorCounters:
    """Updated on the loop thread, read by the progress reporter."""

    events_sent: int = 0
    events_failed: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    ticks_sent: int = 0
    frames_sent: int = 0
    frames_failed: int = 0
    frame_bytes_sent: int = 0
    done: bool = False


def tick_key(partition: int, partitions: int) -> str:
    """A key that the partitioned producer routes to ``partition``."""
    n = 0
    while key_partition(f"tick-{n}", partitions) != partition:
        n += 1
    return f"tick-{n}"


#: What ``create_producer`` gives: a partitioned topic's producer, or one topic's.
AnyProducer = aio.Producer | aio.PartitionedProducer


class MqttPublisher(Protocol):
    """The vehicles over MQTT (``mqtt_vehicles.MqttVehicles``), as the simulator sees them."""

    def publish(self, vehicle_id: str, payload: bytes) -> asyncio.Future[None]: ...


class Simulator:
    def __init__(
        self, settings: CitySettings, city: City, client: aio.Client, mqtt: MqttPublisher | None = None
    ) -> None:
        self.settings = settings
        self.city = city
        self.client = client
        #: ``--mqtt``: the vehicles publish their own readings.
        self.mqtt = mqtt
        self.counters = SimulatorCounters()
        self.start_ms = 0
        self._telemetry_producer: AnyProducer | None = None
        self._cameras: dict[str, AnyProducer] = {}
        #: The frames sent, as the pipeline sees them (their event time is known once sent).
        self.frame_records: list[dict] = []
        #: Where each vehicle report also goes, keyed by the vehicle (None: nowhere).
        self.vehicle_state: VehicleState | None = None

    async def open(self) -> None:
        """Create the producers: the telemetry gateway and one chunking producer per camera."""
        self._telemetry_producer = await self.client.create_producer(
            self.settings.telemetry_topic,
            producer_name="city-gateway",
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )
        for plan in self.city.frames:
            if plan.camera not in self._cameras:
                self._cameras[plan.camera] = await self.client.create_producer(
                    self.settings.frames_topic, producer_name=plan.camera, chunking_enabled=True
                )

    async def play(self) -> None:
        """Play the whole plan, paced from now, then send the closing ticks."""
        self.start_ms = int(time.time() * 1000)
        try:
            await asyncio.gather(self._telemetry(self._gateway), self._frames(self._cameras))
            await self._gateway.flush()
            await self.before_closing_ticks()
            await self.send_ticks(self.closing_tick_ms)
        finally:
            self.counters.done = True

    @property
    def _gateway(self) -> AnyProducer:
        """The telemetry producer (``open`` made it)."""
        if self._telemetry_producer is None:
            raise RuntimeError("the simulator is not open")
        return self._telemetry_producer

    async def before_closing_ticks(self) -> None:
        """Called once every event is sent, before the ticks that close every window: a subclass
        whose events reach the pipeline later (replicated) waits for them here."""

    async def close(self) -> None:
        for producer in [self._telemetry_producer, *self._cameras.values()]:
            if producer is not None:
                await producer.close()

    async def run(self) -> None:
        await self.open()
        try:
            await self.play()
        finally:
            await self.close()

    @property
    def closing_tick_ms(self) -> int:
        """Past the last window's end plus the watermark delay: every window closes."""
        s = self.settings
        return self.start_ms + int((s.duration_s + s.max_lateness_s + s.window_s + s.watermark_s + 1) * 1000)

    @property
    def last_window_end_ms(self) -> int:
        """The end of the window of the latest event time the plan has."""
        last = self.start_ms + max((r.event_ms for r in self.city.readings), default=0)
        return last - last % self.settings.window_ms + self.settings.window_ms

    async def _sleep_until(self, offset_ms: int) -> None:
        delay = (self.start_ms + offset_ms) / 1000 - time.time()
        if delay > 0:
            await asyncio.sleep(delay)

    async def _telemetry(self, producer: AnyProducer) -> None:
        pending = []
        for reading in self.city.readings:
            await self._sleep_until(reading.send_ms)
            record = reading.record(self.start_ms)
            payload = json.dumps(record).encode()
            future: asyncio.Future[MessageId] | asyncio.Future[None]
            if self.mqtt is not None and reading.kind == VEHICLE:
                future = self.mqtt.publish(reading.device, payload)  # the vehicle itself, over MQTT
            else:
                future = await producer.send_async(
                    payload, partition_key=reading.area, event_timestamp=record["ts"]
                )
            future.add_done_callback(functools.partial(self._sent, kind=reading.kind))
            pending.append(future)
            if self.vehicle_state is not None and reading.kind == VEHICLE:
                await self.vehicle_state.report(reading.device, payload)
        await asyncio.gather(*pending, return_exceptions=True)

    def _sent(self, future: asyncio.Future[MessageId] | asyncio.Future[None], kind: str) -> None:
        if future.cancelled() or future.exception() is not None:
            self.counters.events_failed += 1
            return
        self.counters.events_sent += 1
        self.counters.by_kind[kind] = self.counters.by_kind.get(kind, 0) + 1

    async def _frames(self, producers: dict[str, AnyProducer]) -> None:
        sends = []
        for plan in self.city.frames:
            await self._sleep_until(plan.send_ms)
            sends.append(asyncio.create_task(self._send_frame(producers[plan.camera], plan)))
        await asyncio.gather(*sends)

    async def _send_frame(self, producer: AnyProducer, plan: FramePlan) -> None:
        content = await asyncio.to_thread(plan.content)
        properties = await asyncio.to_thread(plan.properties, content)
        taken_ms = int(time.time() * 1000)  # the frame's event time: when it is ready to go
        try:
            await producer.send(content, properties=properties, event_timestamp=taken_ms)
        except Exception:
            log.exception("frame %d from %s was not sent", plan.index, plan.camera)
            self.counters.frames_failed += 1
            return
        self.counters.frames_sent += 1
        self.counters.frame_bytes_sent += len(content)
        self.frame_records.append(plan.record(taken_ms))

    async def send_ticks(self, ts: int) -> None:
        """One clock tick with event time ``ts`` to every partition (counted apart from events)."""
        partitions = self.settings.partitions
        for partition in range(partitions):
            record = {"kind": TICK, "device": "clock", "area": "", "ts": ts}
            record.update(vibration=None, speed_kmh=None, damage=None)
            await self._gateway.send(
                json.dumps(record).encode(), partition_key=tick_key(partition, partitions), event_timestamp=ts
            )
            self.counters.ticks_sent += 1
