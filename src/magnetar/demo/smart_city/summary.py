"""The job's outcome: one ``Summary`` (asserted by the tests) and its printed form."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from magnetar.demo.smart_city.archive import ArchiveReport
from magnetar.demo.smart_city.districts import DistrictReport
from magnetar.demo.smart_city.vehicle_state import VehicleStateReport


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) of ``values``; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class Latency:
    """Percentiles in milliseconds over ``count`` samples."""

    count: int
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Latency:
        return cls(
            len(values),
            percentile(values, 50),
            percentile(values, 95),
            percentile(values, 99),
            max(values) if values else None,
        )

    def line(self) -> str:
        if not self.count:
            return "no samples"
        parts = (
            f"{name} {_ms(v)}"
            for name, v in (("p50", self.p50), ("p95", self.p95), ("p99", self.p99), ("max", self.max))
        )
        return "  ".join(parts) + f"   ({self.count} receipts)"


def _ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    return f"{ms / 1000:.2f} s" if abs(ms) >= 1000 else f"{ms:.0f} ms"


@dataclass
class Summary:
    areas: list[str]
    damaged_areas: list[str]
    vehicles: int
    sensors: int
    cameras: int
    events_in: int
    events_by_kind: dict[str, int]
    events_failed: int
    spark_rows_read: int
    spark_batches: int
    spark_rows_late: int
    alerts_out: int
    alerts_by_area: dict[str, int]
    duplicate_alerts: int
    expected_alerts: int
    missing_alerts: list[str]
    unexpected_alerts: list[str]
    receipts: int
    expected_receipts: int
    vehicles_missing_alerts: list[str]
    latency: Latency
    pipeline_latency: Latency
    broadcast_latency: Latency
    frames_sent: int
    frames_planned: int
    frames_intact: int
    frames_corrupt: int
    frame_bytes: int
    frame_latency: Latency
    wall_s: float
    drained: bool
    errors: list[str] = field(default_factory=list)
    #: ``--secure``: how the run was secured ("" when it was not), and what a vehicle trying
    #: another area's alerts topic got (it must be refused).
    security: str = ""
    refusal: str = ""
    refused: bool = False
    #: ``--districts`` (2 or more): each district's replication to central and alerts back.
    districts: list[DistrictReport] = field(default_factory=list)
    #: ``--offload-frames``: the frames kept in tiered storage and read back (None: not asked).
    archive: ArchiveReport | None = None
    #: ``--mqtt``: the vehicles over MQTT ("" when they used the Pulsar protocol).
    mqtt: str = ""
    #: The main job's compacted topic of the latest state per vehicle and its table view.
    vehicle_state: VehicleStateReport | None = None
    #: Every alert receipt's latency (``latency`` is their percentiles): the report's histogram.
    latency_samples_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def clean_area_alerts(self) -> int:
        return sum(n for area, n in self.alerts_by_area.items() if area not in self.damaged_areas)

    @property
    def ok(self) -> bool:
        return (
            self.drained
            and not self.errors
            and not self.missing_alerts
            and not self.unexpected_alerts
            and not self.duplicate_alerts
            and not self.vehicles_missing_alerts
            and self.clean_area_alerts == 0
            and all(self.alerts_by_area.get(a) for a in self.damaged_areas)
            and self.frames_intact == self.frames_planned == self.frames_sent
            and (not self.security or self.refused)
            and all(d.ok for d in self.districts)
            and (self.archive is None or self.archive.ok)
            and (self.vehicle_state is None or self.vehicle_state.ok)
        )

    def render(self) -> str:
        by_area = ", ".join(f"{a}: {n}" for a, n in sorted(self.alerts_by_area.items())) or "none"
        damaged = ", ".join(self.damaged_areas) or "none"
        kinds = " · ".join(f"{k}s {n:,}" for k, n in sorted(self.events_by_kind.items()))
        lines = [
            "",
            "Smart city — summary",
            f"  city                {len(self.areas)} areas (damaged: {damaged}),"
            f" {self.vehicles} vehicles, {self.sensors} sensors, {self.cameras} cameras",
            f"  events in           {self.events_in:,} ({kinds})"
            + (f", {self.events_failed} failed" if self.events_failed else ""),
            f"  spark read          {self.spark_rows_read:,} rows in {self.spark_batches} micro-batches"
            f" ({self.spark_rows_late} dropped as late)",
            f"  alerts out          {self.alerts_out} ({by_area}); clean areas: {self.clean_area_alerts};"
            f" duplicates: {self.duplicate_alerts}",
            f"  reference detector  {self.expected_alerts} expected, {len(self.missing_alerts)} missing,"
            f" {len(self.unexpected_alerts)} unexpected",
            f"  alert receipts      {self.receipts} of {self.expected_receipts} expected"
            + (
                f"; vehicles missing alerts: {', '.join(self.vehicles_missing_alerts[:5])}"
                if self.vehicles_missing_alerts
                else " (every vehicle got every alert of its area)"
            ),
            f"  alert latency       {self.latency.line()}",
            "    (trigger event time -> vehicle receipt)",
            f"    pipeline          {self.pipeline_latency.line()}",
            "    (trigger event time -> alert published: window end + watermark + micro-batch)",
            f"    broadcast         {self.broadcast_latency.line()}",
            "    (alert published -> vehicle receipt)",
            f"  large frames        {self.frames_intact}/{self.frames_planned} delivered intact"
            f" ({self.frames_sent} sent, {self.frames_corrupt} corrupt, {self.frame_bytes / 2**20:,.1f} MiB),"
            f" arrival {self.frame_latency.line().split('   ')[0]}",
            f"  wall time           {self.wall_s:.1f} s",
        ]
        if self.mqtt:
            lines.insert(-1, f"  vehicles over MQTT  {self.mqtt}")
        if self.security:
            lines.insert(-1, f"  secured             {self.security}")
            lines.insert(-1, f"  access check        {self.refusal}")
        if self.vehicle_state is not None:
            lines[-1:-1] = self.vehicle_state.lines()
        for district in self.districts:
            lines[-1:-1] = district.lines()
        if self.archive is not None:
            lines.insert(-1, f"  frames archive      {self.archive.line()}")
        if not self.drained:
            lines.append("  WARNING: the pipeline did not catch up before the drain timeout")
        lines += [f"  error: {e}" for e in self.errors[:10]]
        lines.append(f"  result              {'OK' if self.ok else 'FAILED'}")
        return "\n".join(lines)
