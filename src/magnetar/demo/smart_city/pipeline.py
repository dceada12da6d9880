"""The Spark Structured Streaming pipeline: raw telemetry in, road-damage alerts out.

    city-telemetry + city-frames (magnetar source, one stream)
      -> telemetry: parse the JSON records; frames: camera, area and road-damage flag from the
         properties, event time from the message (the 6-12 MB value is dropped at once)
      -> watermark (``watermark_s``); the clock ticks only move it on
      -> per area and tumbling event-time window (``window_s``): vibration hits, camera
         flags, vehicles seen, average speed, peak vibration, when the hits and flags happened
      -> keep the windows the DamageRule matches (append mode: a window is reported once,
         when the watermark closes it)
      -> one alert per window to city-alerts-<area> (magnetar sink, exactly once)

``alerts_of`` is the transformation alone, so it can run on a static DataFrame too.
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from magnetar.demo.smart_city.city import CAMERA, FRAME, SENSOR, VEHICLE
from magnetar.demo.smart_city.detection import DamageRule
from magnetar.demo.smart_city.settings import CitySettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

RECORD_SCHEMA = (
    "kind STRING, device STRING, area STRING, ts BIGINT, vibration DOUBLE, speed_kmh DOUBLE, damage BOOLEAN"
)
LOG4J = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
# Spark's own level equal to the root's, or it announces "Setting default log level".
logger.spark.name = org.apache.spark
logger.spark.level = error
"""


def rule_of(settings: CitySettings) -> DamageRule:
    return DamageRule(settings.vibration_threshold, settings.min_vibration_hits, settings.min_camera_flags)


def alerts_of(raw: DataFrame, settings: CitySettings) -> DataFrame:
    """Alert rows (topic, key, value, event_time, properties) from the source's rows."""
    rule = rule_of(settings)
    return _alert_rows(_matched_windows(_records(raw, settings), settings, rule), settings, rule)


def _records(raw: DataFrame, settings: CitySettings) -> DataFrame:
    """One row per event (kind, device, area, ts, vibration, speed_kmh, damage): telemetry parsed
    from its JSON, frames read from their properties."""
    from pyspark.sql import functions as F

    is_frame = F.col("topic") == settings.frames_topic
    props = F.col("properties")
    parsed = F.from_json(F.when(~is_frame, F.col("value").cast("string")), RECORD_SCHEMA)
    return raw.select(
        F.when(is_frame, F.lit(FRAME)).otherwise(parsed["kind"]).alias("kind"),
        F.when(is_frame, props["camera"]).otherwise(parsed["device"]).alias("device"),
        F.when(is_frame, props["area"]).otherwise(parsed["area"]).alias("area"),
        F.when(is_frame, F.unix_millis("event_time")).otherwise(parsed["ts"]).alias("ts"),
        parsed["vibration"].alias("vibration"),
        parsed["speed_kmh"].alias("speed_kmh"),
        F.when(is_frame, props["road-damage"] == "true").otherwise(parsed["damage"]).alias("damage"),
    )


def _matched_windows(records: DataFrame, settings: CitySettings, rule: DamageRule) -> DataFrame:
    """Per area and event-time window, past the watermark: the counts the rule reads, kept where
    it matches."""
    from pyspark.sql import functions as F

    # Clock ticks are not filtered out: Spark pushes a filter that does not name the event-time
    # column below the watermark, and the ticks must reach it. They form their own area ("")
    # with no hits and no flags, which the rule never matches.
    devices = records.withColumn("event_time", F.timestamp_millis("ts")).withWatermark(
        "event_time", f"{int(settings.watermark_s * 1000)} milliseconds"
    )
    kind = F.col("kind")
    hit = (kind == SENSOR) & (F.col("vibration") >= rule.vibration_threshold)
    flag = kind.isin(CAMERA, FRAME) & F.col("damage")
    windows = devices.groupBy("area", F.window("event_time", f"{settings.window_ms} milliseconds")).agg(
        F.count(F.when(hit, 1)).alias("vibration_hits"),
        F.count(F.when(flag, 1)).alias("camera_flags"),
        F.max(F.when(kind == SENSOR, F.col("vibration"))).alias("max_vibration"),
        F.size(F.collect_set(F.when(kind == VEHICLE, F.col("device")))).alias("vehicles"),
        F.round(F.avg(F.when(kind == VEHICLE, F.col("speed_kmh"))), 1).alias("avg_speed_kmh"),
        F.array_sort(F.collect_list(F.when(hit, F.col("ts")))).alias("hit_times"),
        F.array_sort(F.collect_list(F.when(flag, F.col("ts")))).alias("flag_times"),
    )
    return windows.filter(
        (F.col("vibration_hits") >= rule.min_vibration_hits)
        & (F.col("camera_flags") >= rule.min_camera_flags)
    )


def _alert_rows(matched: DataFrame, settings: CitySettings, rule: DamageRule) -> DataFrame:
    """The sink's rows of the matched windows: one JSON alert each, to its area's alerts topic,
    at the event time its rule was met (the later of the last hit and the last flag it needed)."""
    from pyspark.sql import functions as F

    triggers = []
    if rule.min_vibration_hits:
        triggers.append(F.element_at("hit_times", rule.min_vibration_hits))
    if rule.min_camera_flags:
        triggers.append(F.element_at("flag_times", rule.min_camera_flags))
    start_ms = F.unix_millis(F.col("window.start"))
    alert_id = F.concat_ws("/", F.col("area"), start_ms.cast("string"))
    fields = ["vibration_hits", "camera_flags", "max_vibration", "vehicles", "avg_speed_kmh"]
    alerts = matched.select(
        F.col("area"),
        alert_id.alias("alert_id"),
        start_ms.alias("window_start_ms"),
        F.unix_millis(F.col("window.end")).alias("window_end_ms"),
        (F.greatest(*triggers) if len(triggers) > 1 else triggers[0]).alias("trigger_ms"),
        *fields,
    )
    value = F.to_json(
        F.struct(
            "alert_id",
            F.lit("road-damage").alias("type"),
            "area",
            "window_start_ms",
            "window_end_ms",
            "trigger_ms",
            *fields,
        )
    )
    return alerts.select(
        F.concat(F.lit(settings.alerts_topic("")), F.col("area")).alias("topic"),
        F.col("area").alias("key"),
        value.cast("binary").alias("value"),
        F.timestamp_millis("trigger_ms").alias("event_time"),
        F.create_map(F.lit("alert_id"), F.col("alert_id"), F.lit("area"), F.col("area")).alias("properties"),
    )


def spark_session(settings: CitySettings, work_dir: Path) -> SparkSession:
    from pyspark.sql import SparkSession

    import magnetar.spark

    work_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers import magnetar from here
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = work_dir / "log4j2.properties"
    log4j.write_text(LOG4J)
    spark = (
        SparkSession.builder.master(settings.spark_master)
        .appName("magnetar-smart-city")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(work_dir / "tmp"))
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(spark)
    return spark


class SparkPipeline:
    """The streaming query and what the job reads of its progress."""

    def __init__(
        self,
        settings: CitySettings,
        service_url: str,
        admin_url: str,
        work_dir: Path,
        connection_options: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.service_url = service_url
        self.admin_url = admin_url
        #: The connector's credentials and TLS options (``--secure``), for the source and the sink.
        self.connection_options = connection_options or {}
        self.work_dir = work_dir
        self.spark: SparkSession | None = None
        self.query: StreamingQuery | None = None
        self._batches: dict[int, int] = {}  # batch id -> input rows
        self.progress: list[dict] = []  # every progress report, in order
        #: The watermark of the latest completed batch: every window ending by it has been reported.
        self.watermark_ms = 0
        #: Rows the aggregation dropped as older than the watermark.
        self.rows_late = 0

    def start(self) -> None:
        s = self.settings
        self.spark = spark_session(s, self.work_dir)
        raw = (
            self.spark.readStream.format("magnetar")
            .option("service_url", self.service_url)
            .option("admin_url", self.admin_url)
            .options(**self.connection_options)
            .option("topics", f"{s.telemetry_topic},{s.frames_topic}")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(s.max_offsets_per_trigger))
            .load()
        )
        self.query = (
            alerts_of(raw, s)
            .writeStream.format("magnetar")
            .option("service_url", self.service_url)
            .option("admin_url", self.admin_url)
            .options(**self.connection_options)
            .option("enableDeduplication", "true")  # exactly-once output rests on it
            # After the aggregation's shuffle a replayed batch may hand a task its rows in
            # another order; sorting keeps each row's sequence id the same on replay.
            .option("sortBeforeWrite", "true")
            .option("checkpointLocation", str(self.work_dir / "checkpoint"))
            .outputMode("append")
            .queryName("smart-city-road-damage")
            .trigger(processingTime=f"{s.trigger_ms} milliseconds")
            .start()
        )

    def poll(self) -> None:
        """Take in the progress reports made since the last poll."""
        if self.query is None:
            return
        for progress in self.query.recentProgress:
            if progress["batchId"] not in self._batches:
                self.progress.append(progress)
                self.rows_late += sum(
                    op.get("numRowsDroppedByWatermark", 0) for op in progress.get("stateOperators") or []
                )
                watermark = (progress["eventTime"] or {}).get("watermark")
                if watermark:
                    self.watermark_ms = max(self.watermark_ms, _epoch_ms(watermark))
            self._batches[progress["batchId"]] = progress["numInputRows"]
        if self.query.exception() is not None:
            raise RuntimeError(f"the streaming query failed: {self.query.exception()}")

    @property
    def rows_read(self) -> int:
        return sum(self._batches.values())

    @property
    def batches(self) -> int:
        return len(self._batches)

    @property
    def last_batch(self) -> int:
        return max(self._batches, default=-1)

    def stop(self) -> None:
        if self.query is not None:
            try:
                self.query.stop()
            except Exception:
                log.exception("stopping the streaming query")
        if self.spark is not None:
            self.spark.stop()
        self.query = self.spark = None


def _epoch_ms(iso: str) -> int:
    """Milliseconds since the epoch of a progress report's time (``2026-01-01T00:00:00.000Z``)."""
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)
