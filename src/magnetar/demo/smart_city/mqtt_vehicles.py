"""``--mqtt``: the vehicles speak MQTT to the broker's MQTT port, as a car's telematics unit would.

Each vehicle is a paho-mqtt client (MQTT 5.0, clean start), with its vehicle id as client id:

- it publishes its telemetry at QoS 1 to the partition of ``city-telemetry`` its area's key routes
  to, named as an MQTT Topic Name ``persistent://{namespace}/city-telemetry-partition-K`` (a name
  with a domain names its topic itself, Pulsar's MQTT handler's rule), so the pipeline reads it
  with everything else, in the area's partition; a reading counts as sent once PUBACKed (stored);
- it subscribes at QoS 1 to ``persistent://{namespace}/city-alerts-<area>`` and records every
  alert it receives (``Receipt``); MQTT carries no publish time, so the split of its latency at
  the alert's publish time uses the time the control room's Pulsar consumer saw (``fanout.py``).

With ``--secure`` the vehicles connect to ``mqtts://`` (the job's CA trusted, the hostname
checked) with their token as the password; their role may consume their area's alerts and
produce the telemetry, nothing else. paho runs each client's network loop on a thread of its
own; what its callbacks learn is handed to the job's asyncio loop (``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import paho.mqtt.client as paho

from magnetar.demo.smart_city.city import VEHICLE, City
from magnetar.demo.smart_city.detection import Alert
from magnetar.demo.smart_city.fanout import Receipt
from magnetar.demo.smart_city.security import SecureCity, vehicle_role
from magnetar.demo.smart_city.settings import CitySettings
from magnetar.protocol.key_hash import key_partition

log = logging.getLogger(__name__)

#: How long a vehicle may take to connect and subscribe.
CONNECT_TIMEOUT_S = 30.0


@dataclass
class _Vehicle:
    id: str
    area: str
    client: paho.Client
    connected: asyncio.Future[int]
    #: Packet id of a SUBSCRIBE -> the future of its SUBACK's first reason code.
    subacks: dict[int, asyncio.Future[int]] = field(default_factory=dict)
    #: Packet id of a QoS 1 PUBLISH -> the future its PUBACK completes.
    pending: dict[int, asyncio.Future[None]] = field(default_factory=dict)


class MqttVehicles:
    def __init__(
        self, settings: CitySettings, city: City, port: int, secure: SecureCity | None = None
    ) -> None:
        self.settings = settings
        self.city = city
        self.port = port
        self.secure = secure
        self.receipts: list[Receipt] = []
        self.errors: list[str] = []
        self.acknowledged = 0
        self._vehicles: dict[str, _Vehicle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def url(self) -> str:
        return f"{'mqtts' if self.secure is not None else 'mqtt'}://127.0.0.1:{self.port}"

    def telemetry_topic(self, area: str) -> str:
        """The MQTT Topic Name of the partition of ``city-telemetry`` ``area``'s key routes to."""
        partition = key_partition(area, self.settings.partitions)
        return f"{self.settings.telemetry_topic}-partition-{partition}"

    async def start(self) -> None:
        """Connect every vehicle and subscribe it to its area's alerts (before any alert exists)."""
        self._loop = loop = asyncio.get_running_loop()
        for device in self.city.devices_of(VEHICLE):
            client = paho.Client(paho.CallbackAPIVersion.VERSION2, client_id=device.id, protocol=paho.MQTTv5)
            vehicle = _Vehicle(device.id, device.area, client, loop.create_future())
            self._vehicles[device.id] = vehicle
            if self.secure is not None:
                client.username_pw_set(vehicle_role(device.id), self.secure.vehicle_tokens[device.id])
                client.tls_set(ca_certs=str(self.secure.tls.ca))  # the hostname is checked too
            client.on_connect = self._on_connect(vehicle)
            client.on_subscribe = self._on_subscribe(vehicle)
            client.on_publish = self._on_publish(vehicle)
            client.on_message = self._on_message(vehicle)
            client.connect_async("127.0.0.1", self.port, keepalive=60)
            client.loop_start()
        for vehicle in self._vehicles.values():
            code = await asyncio.wait_for(vehicle.connected, CONNECT_TIMEOUT_S)
            if code != 0:
                raise ConnectionError(f"{vehicle.id}: CONNECT refused with {code:#x}")
        for vehicle in self._vehicles.values():
            code = await self.subscribe(vehicle.id, self.settings.alerts_topic(vehicle.area))
            if code >= 0x80:
                raise ConnectionError(f"{vehicle.id}: SUBSCRIBE to its area's alerts refused with {code:#x}")

    async def subscribe(self, vehicle_id: str, topic: str) -> int:
        """SUBSCRIBE ``vehicle_id`` to ``topic`` at QoS 1; the SUBACK's reason code."""
        vehicle = self._vehicles[vehicle_id]
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        result, mid = vehicle.client.subscribe(topic, qos=1)
        if result != paho.MQTT_ERR_SUCCESS or mid is None:
            raise ConnectionError(f"{vehicle_id}: SUBSCRIBE not sent ({paho.error_string(result)})")
        vehicle.subacks[mid] = future
        return await asyncio.wait_for(future, CONNECT_TIMEOUT_S)

    def publish(self, vehicle_id: str, payload: bytes) -> asyncio.Future[None]:
        """Publish a reading of ``vehicle_id`` at QoS 1; the future its PUBACK completes. Called on
        the job's loop, which is also where the PUBACK is learnt (so it never comes first)."""
        vehicle = self._vehicles[vehicle_id]
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        info = vehicle.client.publish(self.telemetry_topic(vehicle.area), payload, qos=1)
        if info.rc != paho.MQTT_ERR_SUCCESS:
            why = paho.error_string(info.rc)
            future.set_exception(ConnectionError(f"{vehicle_id}: PUBLISH not sent ({why})"))
        else:
            vehicle.pending[info.mid] = future
        return future

    async def stop(self) -> None:
        for vehicle in self._vehicles.values():
            vehicle.client.disconnect()
        for vehicle in self._vehicles.values():
            await asyncio.to_thread(vehicle.client.loop_stop)

    # -- paho's callbacks (its threads): handed to the job's loop ----------------------------------
    def _later(self, callback: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(callback, *args)

    def _on_connect(self, vehicle: _Vehicle) -> Callable[..., None]:
        def on_connect(client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
            self._later(_settle, vehicle.connected, reason_code.value)

        return on_connect

    def _on_subscribe(self, vehicle: _Vehicle) -> Callable[..., None]:
        def on_subscribe(client: Any, userdata: Any, mid: int, reason_codes: Any, properties: Any) -> None:
            self._later(self._subacked, vehicle, mid, reason_codes[0].value)

        return on_subscribe

    def _subacked(self, vehicle: _Vehicle, mid: int, code: int) -> None:
        future = vehicle.subacks.pop(mid, None)
        if future is not None:
            _settle(future, code)

    def _on_publish(self, vehicle: _Vehicle) -> Callable[..., None]:
        def on_publish(client: Any, userdata: Any, mid: int, reason_code: Any, properties: Any) -> None:
            self._later(self._acked, vehicle, mid, reason_code.value)

        return on_publish

    def _acked(self, vehicle: _Vehicle, mid: int, code: int) -> None:
        future = vehicle.pending.pop(mid, None)
        if future is None or future.done():
            return
        if code >= 0x80:
            future.set_exception(ConnectionError(f"{vehicle.id}: PUBLISH refused with {code:#x}"))
        else:
            self.acknowledged += 1
            future.set_result(None)

    def _on_message(self, vehicle: _Vehicle) -> Callable[..., None]:
        def on_message(client: Any, userdata: Any, message: Any) -> None:
            self._later(self._received, vehicle, message.payload, int(time.time() * 1000))

        return on_message

    def _received(self, vehicle: _Vehicle, payload: bytes, received_ms: int) -> None:
        try:
            alert = Alert.from_json(payload)
        except (ValueError, KeyError, TypeError) as exc:
            self.errors.append(f"{vehicle.id}: unreadable alert over MQTT: {exc}")
            return
        # published_ms 0: known once the control room has the alert (AlertFanout.resolve_published)
        receipt = Receipt(vehicle.id, vehicle.area, alert.alert_id, alert.trigger_ms, 0, received_ms)
        self.receipts.append(receipt)


def _settle(future: asyncio.Future[int], value: int) -> None:
    if not future.done():
        future.set_result(value)
