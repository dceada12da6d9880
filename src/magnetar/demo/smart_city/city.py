"""The city and everything that happens in it, planned up front from the seed (pure, no I/O).

A plan is a list of readings with times relative to the start of the run, so the same seed
always plays the same city; the simulator only paces it in real time. Ground truth:

- A *damaged* area's sensors read high vibration (hits) from ``damage_start_s`` on, its
  cameras flag damage and its traffic slows down.
- Every area, damaged or not, also sees the occasional vibration spike (a heavy truck), at
  most one per window, and cameras flag damage by mistake at ``camera_false_positive_rate``.
  Neither alone, nor both together, is enough for an alert while ``min_vibration_hits >= 2``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from magnetar.demo.smart_city.settings import CitySettings

VEHICLE, SENSOR, CAMERA, FRAME, TICK = "vehicle", "sensor", "camera", "frame", "tick"


@dataclass(frozen=True, slots=True)
class Device:
    id: str
    kind: str
    area: str


@dataclass(frozen=True, slots=True)
class Reading:
    """One telemetry event: it happens at ``event_ms`` and is sent at ``send_ms`` (both relative)."""

    send_ms: int
    event_ms: int
    kind: str
    device: str
    area: str
    vibration: float | None = None
    speed_kmh: float | None = None
    damage: bool | None = None

    def record(self, start_ms: int) -> dict:
        """The JSON object the device publishes, with its absolute event time ``ts`` in ms."""
        return {
            "kind": self.kind,
            "device": self.device,
            "area": self.area,
            "ts": start_ms + self.event_ms,
            "vibration": self.vibration,
            "speed_kmh": self.speed_kmh,
            "damage": self.damage,
        }


@dataclass(frozen=True, slots=True)
class FramePlan:
    """One large camera frame (a key scene): random bytes of ``size``, reproducible from the seed."""

    index: int
    send_ms: int
    camera: str
    area: str
    size: int
    damage: bool
    seed: int

    def content(self) -> bytes:
        return random.Random(self.seed).randbytes(self.size)

    def record(self, taken_ms: int) -> dict:
        """The frame as the pipeline sees it: a camera flag (or not) at ``taken_ms``."""
        return {
            "kind": FRAME,
            "device": self.camera,
            "area": self.area,
            "ts": taken_ms,
            "vibration": None,
            "speed_kmh": None,
            "damage": self.damage,
        }

    def properties(self, content: bytes) -> dict[str, str]:
        return {
            "camera": self.camera,
            "area": self.area,
            "road-damage": "true" if self.damage else "false",
            "frame-index": str(self.index),
            "size": str(len(content)),
            "sha256": hashlib.sha256(content).hexdigest(),
        }


@dataclass(frozen=True)
class City:
    areas: tuple[str, ...]
    damaged: frozenset[str]
    devices: tuple[Device, ...]
    readings: tuple[Reading, ...]
    frames: tuple[FramePlan, ...]

    def devices_of(self, kind: str) -> list[Device]:
        return [d for d in self.devices if d.kind == kind]

    @property
    def clean(self) -> list[str]:
        return [a for a in self.areas if a not in self.damaged]


def build_city(settings: CitySettings) -> City:
    rng = random.Random(settings.seed)
    areas = tuple(f"area-{i + 1}" for i in range(settings.areas))
    damaged = frozenset(rng.sample(areas, settings.damaged_areas))
    devices = _devices(settings, areas)
    readings = sorted(
        (r for device in devices for r in _readings_of(settings, device, device.area in damaged, rng)),
        key=lambda r: (r.send_ms, r.device, r.event_ms),
    )
    return City(
        areas, damaged, tuple(devices), tuple(readings), tuple(_frames(settings, devices, damaged, rng))
    )


def _devices(settings: CitySettings, areas: tuple[str, ...]) -> list[Device]:
    devices = []
    vehicle = 0
    for area in areas:
        for _ in range(settings.vehicles_per_area):
            vehicle += 1
            devices.append(Device(f"vehicle-{vehicle:04d}", VEHICLE, area))
        devices += [Device(f"sensor-{area}-{i + 1}", SENSOR, area) for i in range(settings.sensors_per_area)]
        devices += [Device(f"camera-{area}-{i + 1}", CAMERA, area) for i in range(settings.cameras_per_area)]
    return devices


def _readings_of(settings: CitySettings, device: Device, damaged_area: bool, rng: random.Random):
    period_ms = int(
        1000
        * {
            VEHICLE: settings.vehicle_period_s,
            SENSOR: settings.sensor_period_s,
            CAMERA: settings.camera_period_s,
        }[device.kind]
    )
    duration_ms = int(settings.duration_s * 1000)
    damage_ms = int(settings.damage_start_s * 1000) if damaged_area else None
    lateness_ms = int(settings.max_lateness_s * 1000)
    # Only an area's first sensor sees truck spikes, spaced more than a window apart.
    spiky = device.kind == SENSOR and device.id.endswith("-1")
    last_spike = -(10**9)
    event_ms = rng.randrange(period_ms)
    while event_ms < duration_ms:
        damaged = damage_ms is not None and event_ms >= damage_ms
        values: dict = {}
        if device.kind == VEHICLE:
            values["speed_kmh"] = round(max(3.0, rng.gauss(20.0 if damaged else 45.0, 6.0)), 1)
        elif device.kind == SENSOR:
            threshold = settings.vibration_threshold
            if damaged and rng.random() < 0.8:
                vibration = rng.uniform(threshold + 0.5, threshold + 4.0)
            elif spiky and event_ms - last_spike > settings.window_ms and rng.random() < 0.25:
                vibration, last_spike = rng.uniform(threshold, threshold + 1.5), event_ms
            else:
                vibration = min(abs(rng.gauss(0.8, 0.3)), 0.8 * threshold)
            values["vibration"] = round(vibration, 3)
        else:
            values["damage"] = rng.random() < (0.9 if damaged else settings.camera_false_positive_rate)
        send_ms = event_ms + rng.randint(0, lateness_ms)
        yield Reading(send_ms, event_ms, device.kind, device.id, device.area, **values)
        event_ms += period_ms


def _frames(settings: CitySettings, devices: list[Device], damaged: frozenset[str], rng: random.Random):
    cameras = [d for d in devices if d.kind == CAMERA]
    if not cameras or settings.frames <= 0:
        return []
    damage_ms = int(settings.damage_start_s * 1000)
    spacing = settings.duration_s * 1000 / settings.frames
    frames = []
    for i in range(settings.frames):
        camera = cameras[i % len(cameras)]
        send_ms = int((i + 0.5) * spacing)
        frames.append(
            FramePlan(
                index=i,
                send_ms=send_ms,
                camera=camera.id,
                area=camera.area,
                size=rng.randint(settings.frame_min_bytes, settings.frame_max_bytes),
                damage=camera.area in damaged and send_ms >= damage_ms,
                seed=rng.getrandbits(64),
            )
        )
    return frames
