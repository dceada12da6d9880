"""Alert fan-out: every vehicle in an area receives its area's alerts.

As in the NTT smart city, each area has its own alerts topic and every vehicle in the area
is connected to it: a consumer of the topic's one broadcast subscription (``vehicles``), as
the seed's Broadcast Subscription does it: one dispatcher and one read of each alert for all
the area's vehicles, a light virtual cursor per vehicle. A *control room* subscribes to every
alerts topic too and counts what the pipeline wrote, duplicates included.

Latency is measured per receipt: from the alert's trigger (the event time at which the
damage rule became true) to the moment the vehicle received it; the alert's publish time
splits it into the pipeline's part and the broadcast's part.

With ``--mqtt`` the vehicles are MQTT clients (``mqtt_vehicles.py``) and only the control room
is a Pulsar consumer here; MQTT carries no publish time, so their receipts take the one the
control room saw (``resolve_published``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.client import aio
from magnetar.demo.smart_city.city import VEHICLE, City
from magnetar.demo.smart_city.detection import Alert
from magnetar.demo.smart_city.settings import CitySettings


@dataclass(frozen=True, slots=True)
class Receipt:
    vehicle: str
    area: str
    alert_id: str
    trigger_ms: int
    published_ms: int
    received_ms: int

    @property
    def latency_ms(self) -> int:
        return self.received_ms - self.trigger_ms

    @property
    def pipeline_ms(self) -> int:
        return self.published_ms - self.trigger_ms

    @property
    def broadcast_ms(self) -> int:
        return self.received_ms - self.published_ms


@dataclass
class ControlRoom:
    """Every alert the pipeline wrote, by id, and how many times each arrived."""

    alerts: dict[str, Alert] = field(default_factory=dict)
    copies: Counter = field(default_factory=Counter)
    last_received: float = 0.0
    #: Alert id -> when the broker stored it (its publish time).
    published: dict[str, int] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.copies.values())


class MqttReceipts(Protocol):
    """The vehicles over MQTT (``mqtt_vehicles.MqttVehicles``), as the fan-out sees them."""

    receipts: list[Receipt]
    errors: list[str]


class AlertFanout:
    def __init__(
        self,
        settings: CitySettings,
        city: City,
        client: aio.Client,
        vehicle_clients: dict[str, aio.Client] | None = None,
        mqtt: MqttReceipts | None = None,
    ) -> None:
        """``vehicle_clients``: a vehicle's own client (its own role, ``--secure``); others use
        ``client``. ``mqtt``: the vehicles are MQTT clients, which record their own receipts."""
        self.settings = settings
        self.city = city
        self.client = client
        self.vehicle_clients = vehicle_clients or {}
        self.mqtt = mqtt
        self.receipts: list[Receipt] = mqtt.receipts if mqtt is not None else []
        self.control_room = ControlRoom()
        self.errors: list[str] = []
        self._tasks: list[asyncio.Task] = []

    async def start(self) -> None:
        """Connect every vehicle and the control room (before any alert can exist)."""
        consumers = []
        for vehicle in self.city.devices_of(VEHICLE) if self.mqtt is None else ():
            client = self.vehicle_clients.get(vehicle.id, self.client)
            consumer = await client.subscribe(
                self.settings.alerts_topic(vehicle.area),
                "vehicles",
                consumer_type=aio.ConsumerType.Broadcast,
                consumer_name=vehicle.id,
                initial_position=aio.InitialPosition.Earliest,
                receiver_queue_size=100,
            )
            consumers.append((consumer, self._vehicle_loop(consumer, vehicle.id, vehicle.area)))
        control = await self.client.subscribe(
            [self.settings.alerts_topic(area) for area in self.city.areas],
            "control-room",
            consumer_type=aio.ConsumerType.Exclusive,
            initial_position=aio.InitialPosition.Earliest,
        )
        consumers.append((control, self._control_loop(control)))
        self._tasks = [asyncio.create_task(loop) for _, loop in consumers]

    async def _vehicle_loop(
        self, consumer: aio.Consumer | aio.MultiTopicsConsumer, vehicle: str, area: str
    ) -> None:
        while True:
            msg = await consumer.receive()
            received_ms = int(time.time() * 1000)
            try:
                alert = Alert.from_json(msg.data())
            except (ValueError, KeyError, TypeError) as exc:
                self.errors.append(f"{vehicle}: unreadable alert {msg.message_id()}: {exc}")
            else:
                self.receipts.append(
                    Receipt(
                        vehicle, area, alert.alert_id, alert.trigger_ms, msg.publish_timestamp(), received_ms
                    )
                )
            await consumer.acknowledge(msg)

    async def _control_loop(self, consumer: aio.Consumer | aio.MultiTopicsConsumer) -> None:
        while True:
            msg = await consumer.receive()
            self.control_room.last_received = time.monotonic()
            try:
                alert = Alert.from_json(msg.data())
            except (ValueError, KeyError, TypeError) as exc:
                self.errors.append(f"control room: unreadable alert {msg.message_id()}: {exc}")
            else:
                self.control_room.alerts.setdefault(alert.alert_id, alert)
                self.control_room.copies[alert.alert_id] += 1
                self.control_room.published.setdefault(alert.alert_id, msg.publish_timestamp())
            await consumer.acknowledge(msg)

    def resolve_published(self) -> None:
        """Receipts that came without the alert's publish time (MQTT) take the control room's."""
        published = self.control_room.published
        for i, r in enumerate(self.receipts):
            if not r.published_ms and r.alert_id in published:
                self.receipts[i] = dataclasses.replace(r, published_ms=published[r.alert_id])

    @property
    def all_errors(self) -> list[str]:
        return self.errors + (self.mqtt.errors if self.mqtt is not None else [])

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
