"""The smart-city job's settings: one dataclass; every field is also a command-line flag.

``--vehicles-per-area 8`` sets ``vehicles_per_area``; the help text is the field's ``help``
metadata (cli.py makes the flags). Defaults are sized to finish in a few minutes on a 2-core machine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


def _setting(default: Any, help: str) -> Any:
    return field(default=default, metadata={"help": help})


@dataclass
class CitySettings:
    # The city.
    seed: int = _setting(2023, "random seed: the same seed plays the same city")
    areas: int = _setting(6, "areas in the city; each has its own alerts topic")
    damaged_areas: int = _setting(2, "areas where the road gets damaged during the run")
    vehicles_per_area: int = _setting(8, "vehicles per area (each one also subscribes to its area's alerts)")
    sensors_per_area: int = _setting(3, "road vibration sensors per area")
    cameras_per_area: int = _setting(1, "cameras per area")
    duration_s: float = _setting(60.0, "seconds of city traffic")
    damage_start_s: float = _setting(15.0, "seconds after the start when the damage appears")
    vehicle_period_s: float = _setting(1.0, "a vehicle reports this often")
    sensor_period_s: float = _setting(0.5, "a sensor reports this often")
    camera_period_s: float = _setting(2.0, "a camera reports a detection this often")
    max_lateness_s: float = _setting(0.5, "devices send up to this late (out-of-order event times)")
    camera_false_positive_rate: float = _setting(0.05, "chance a camera wrongly flags damage")
    # Large frames (key scenes), above the broker's 5 MiB message limit: chunked.
    frames: int = _setting(12, "large camera frames sent during the run")
    frame_min_bytes: int = _setting(6 * MIB, "smallest frame")
    frame_max_bytes: int = _setting(12 * MIB, "largest frame")
    # Detection.
    window_s: float = _setting(5.0, "event-time window length")
    watermark_s: float = _setting(2.0, "watermark delay: how late an event may arrive and still count")
    vibration_threshold: float = _setting(3.0, "a sensor reading at or above this is a vibration hit")
    min_vibration_hits: int = _setting(2, "hits in a window needed for an alert (with a camera flag)")
    min_camera_flags: int = _setting(1, "camera damage flags in a window needed for an alert")
    # Topics and Spark.
    namespace: str = _setting("public/default", "tenant/namespace of the job's topics")
    partitions: int = _setting(2, "partitions of the raw telemetry topic")
    spark_master: str = _setting("local[2]", "Spark master")
    trigger_ms: int = _setting(500, "micro-batch trigger interval")
    shuffle_partitions: int = _setting(1, "Spark shuffle partitions (state store partitions, sink tasks)")
    max_offsets_per_trigger: int = _setting(20000, "most messages one micro-batch reads")
    # Running.
    progress_interval_s: float = _setting(3.0, "print a progress line this often")
    drain_timeout_s: float = _setting(
        90.0, "after the traffic stops, wait at most this long for the pipeline"
    )
    work_dir: str = _setting("", "broker data and Spark checkpoints (default: a temporary directory)")
    keep_work_dir: bool = _setting(False, "keep the work directory at the end")
    report: str = _setting(
        "",
        "the HTML report's path (default: smart-city-report.html in the work directory when it is"
        " kept, else in the system's temporary directory)",
    )
    quiet: bool = _setting(False, "no progress lines")
    secure: bool = _setting(
        False,
        "run secured: the broker on TLS ports only, token authentication and authorization; "
        "each vehicle has its own role, allowed to consume only its area's alerts topic",
    )
    mqtt: bool = _setting(
        False,
        "vehicles speak MQTT (paho-mqtt) to the broker's MQTT port: each publishes its telemetry at QoS 1 "
        "and subscribes to its area's alerts; with --secure over mqtts:// with its token as the password",
    )
    workers: int = _setting(
        1,
        "broker processes of each embedded broker (magnetar standalone --workers N): with 2 or more, the "
        "job's topics and the telemetry's partitions spread over the workers",
    )
    offload_frames: bool = _setting(
        False,
        "keep the camera frames in tiered storage: the frames topic's closed ledgers are offloaded to a "
        "filesystem store as they close and their local copies deleted; at the end every frame is read "
        "back from the store and checked",
    )
    offload_dir: str = _setting("", "the --offload-frames store (default: offloaded/ in the work directory)")
    districts: int = _setting(
        1,
        "districts: with 2 or more, each district runs its own edge broker (cluster district-K) whose raw "
        "telemetry replicates to a central broker where Spark reads; alerts replicate back to the districts",
    )

    def validate(self) -> None:
        if self.areas < 1 or not 0 <= self.damaged_areas <= self.areas:
            raise ValueError("need at least one area and 0 <= damaged_areas <= areas")
        if min(self.vehicles_per_area, self.sensors_per_area, self.cameras_per_area) < 0:
            raise ValueError("device counts cannot be negative")
        if self.frame_min_bytes > self.frame_max_bytes:
            raise ValueError("frame_min_bytes must not exceed frame_max_bytes")
        if self.max_lateness_s >= self.watermark_s:
            raise ValueError("max_lateness_s must be below watermark_s, or late events would be dropped")
        if self.window_s <= 0 or self.duration_s <= 0 or self.partitions < 1:
            raise ValueError("window_s, duration_s and partitions must be positive")
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if not 1 <= self.districts <= self.areas:
            raise ValueError("districts must be between 1 and areas (each district has an area)")
        if self.districts > 1 and self.secure:
            raise ValueError("--districts above 1 does not run --secure")
        if self.offload_frames and (self.districts > 1 or self.workers > 1):
            raise ValueError(
                "--offload-frames runs with one broker process: not with --districts or --workers"
            )
        if self.districts > 1 and self.mqtt:
            raise ValueError("--districts above 1 does not run --mqtt")

    @property
    def window_ms(self) -> int:
        return int(self.window_s * 1000)

    # Topic names.
    def topic(self, local: str) -> str:
        return f"persistent://{self.namespace}/{local}"

    @property
    def telemetry_topic(self) -> str:
        return self.topic("city-telemetry")

    @property
    def frames_topic(self) -> str:
        return self.topic("city-frames")

    def alerts_topic(self, area: str) -> str:
        return self.topic(f"city-alerts-{area}")

    @property
    def vehicle_state_topic(self) -> str:
        return self.topic("city-vehicle-state")

    # Command line (the flags themselves are made in cli.py).
    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> CitySettings:
        """Settings from flag values by field name; ``None`` (a flag not given) keeps the default."""
        names = {f.name for f in dataclasses.fields(cls)}
        settings = cls(**{k: v for k, v in values.items() if k in names and v is not None})
        settings.validate()
        return settings

    def work_path(self) -> Path | None:
        return Path(self.work_dir) if self.work_dir else None
