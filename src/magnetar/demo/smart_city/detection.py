"""Road-damage detection as pure functions: the rule, per-window statistics, alerts.

The Spark pipeline (``pipeline.py``) computes the same statistics with Spark SQL and applies
the same ``DamageRule``; ``reference_alerts`` runs it in plain Python over a list of records,
so the job can check Spark's answer and the tests need no Spark to check the rule.

A window is ``[start, start + window_ms)`` with ``start`` a multiple of ``window_ms`` since the
epoch, as Spark's tumbling ``window()`` cuts them. An area's window raises an alert when it
holds at least ``min_vibration_hits`` sensor readings at or above ``vibration_threshold`` and
at least ``min_camera_flags`` camera damage flags (a camera's detection with ``damage`` true,
or a large frame flagged ``road-damage``). The alert's trigger time is the event time
at which the rule became true: the later of the k-th hit and the m-th flag.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from magnetar.demo.smart_city.city import CAMERA, FRAME, SENSOR, VEHICLE


@dataclass(frozen=True, slots=True)
class DamageRule:
    vibration_threshold: float = 3.0
    min_vibration_hits: int = 2
    min_camera_flags: int = 1

    def __post_init__(self) -> None:
        if self.min_vibration_hits < 0 or self.min_camera_flags < 0:
            raise ValueError("minimum counts cannot be negative")
        if self.min_vibration_hits == 0 and self.min_camera_flags == 0:
            raise ValueError("a rule needs vibration hits or camera flags, or every window would alert")

    def is_hit(self, vibration: float | None) -> bool:
        return vibration is not None and vibration >= self.vibration_threshold

    def matches(self, vibration_hits: int, camera_flags: int) -> bool:
        return vibration_hits >= self.min_vibration_hits and camera_flags >= self.min_camera_flags

    def trigger_ms(self, hit_times: Iterable[int], flag_times: Iterable[int]) -> int:
        """When the rule became true, given the event times of the window's hits and flags."""
        candidates = []
        if self.min_vibration_hits:
            candidates.append(sorted(hit_times)[self.min_vibration_hits - 1])
        if self.min_camera_flags:
            candidates.append(sorted(flag_times)[self.min_camera_flags - 1])
        return max(candidates)


def window_start(ts_ms: int, window_ms: int) -> int:
    return ts_ms - ts_ms % window_ms


@dataclass(slots=True)
class WindowStats:
    """What one area saw in one window."""

    area: str
    start_ms: int
    end_ms: int
    events: int = 0
    vehicles: set[str] = field(default_factory=set)
    speeds: list[float] = field(default_factory=list)
    hit_times: list[int] = field(default_factory=list)
    flag_times: list[int] = field(default_factory=list)
    max_vibration: float = 0.0

    def add(self, record: dict, rule: DamageRule) -> None:
        self.events += 1
        kind, ts = record["kind"], record["ts"]
        if kind == VEHICLE:
            self.vehicles.add(record["device"])
            if record.get("speed_kmh") is not None:
                self.speeds.append(record["speed_kmh"])
        elif kind == SENSOR:
            vibration = record.get("vibration")
            if vibration is not None:
                self.max_vibration = max(self.max_vibration, vibration)
            if rule.is_hit(vibration):
                self.hit_times.append(ts)
        elif kind in (CAMERA, FRAME) and record.get("damage"):
            self.flag_times.append(ts)


@dataclass(frozen=True, slots=True)
class Alert:
    """A road-damage alert for one area and window, as published on the area's alerts topic."""

    area: str
    window_start_ms: int
    window_end_ms: int
    trigger_ms: int
    vibration_hits: int
    camera_flags: int
    max_vibration: float
    vehicles: int
    avg_speed_kmh: float | None

    @property
    def alert_id(self) -> str:
        return f"{self.area}/{self.window_start_ms}"

    def to_json(self) -> bytes:
        return json.dumps({"alert_id": self.alert_id, "type": "road-damage", **asdict(self)}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Alert:
        values = json.loads(data)
        return cls(**{k: values[k] for k in cls.__dataclass_fields__})


def window_stats(
    records: Iterable[dict], rule: DamageRule, window_ms: int
) -> dict[tuple[str, int], WindowStats]:
    """Statistics per (area, window start) of the device records (ticks and unknown kinds skipped)."""
    stats: dict[tuple[str, int], WindowStats] = {}
    for record in records:
        if record["kind"] not in (VEHICLE, SENSOR, CAMERA, FRAME):
            continue
        start = window_start(record["ts"], window_ms)
        key = (record["area"], start)
        if key not in stats:
            stats[key] = WindowStats(record["area"], start, start + window_ms)
        stats[key].add(record, rule)
    return stats


def alert_for(stats: WindowStats, rule: DamageRule) -> Alert | None:
    if not rule.matches(len(stats.hit_times), len(stats.flag_times)):
        return None
    return Alert(
        area=stats.area,
        window_start_ms=stats.start_ms,
        window_end_ms=stats.end_ms,
        trigger_ms=rule.trigger_ms(stats.hit_times, stats.flag_times),
        vibration_hits=len(stats.hit_times),
        camera_flags=len(stats.flag_times),
        max_vibration=stats.max_vibration,
        vehicles=len(stats.vehicles),
        avg_speed_kmh=round(sum(stats.speeds) / len(stats.speeds), 1) if stats.speeds else None,
    )


def reference_alerts(records: Iterable[dict], rule: DamageRule, window_ms: int) -> list[Alert]:
    """The alerts the pipeline must raise for these records, ordered by window then area."""
    alerts = (alert_for(s, rule) for s in window_stats(records, rule, window_ms).values())
    return sorted((a for a in alerts if a is not None), key=lambda a: (a.window_start_ms, a.area))
