"""The job with districts (``--districts N``, N >= 2): each district's devices publish their raw
telemetry to their own edge broker, which replicates it to a central broker where the Spark
pipeline reads; the alerts the pipeline writes at central replicate back to every district, where
the district's vehicles receive them.

    district-K devices ──► edge K: city-telemetry ══► central: city-telemetry ──► Spark ──► city-alerts-<area>
    district-K vehicles ◄── edge K: city-alerts-<area> ◄══════════════════════════════════════════┘

Large frames go to central directly (they are not telemetry), and so do the clock ticks: the
closing ticks are sent once every edge's replication backlog is 0, so no replicated reading can
arrive behind the watermark they move. A replication audit at central counts what each district's
edge delivered (by ``replicated_from``): exactly once means every reading once, no more.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import shutil
import tempfile
import time
from pathlib import Path

from magnetar.client import aio
from magnetar.client.message import MessageId
from magnetar.demo.smart_city.city import VEHICLE, City
from magnetar.demo.smart_city.districts import Arrivals, DistrictReport, Lag, districts_of_areas
from magnetar.demo.smart_city.edges import Districts
from magnetar.demo.smart_city.fanout import AlertFanout
from magnetar.demo.smart_city.frames import FrameVerifier
from magnetar.demo.smart_city.job import Job
from magnetar.demo.smart_city.pipeline import SparkPipeline
from magnetar.demo.smart_city.runtime import LoopThread, broker_settings, connect
from magnetar.demo.smart_city.settings import CitySettings
from magnetar.demo.smart_city.simulator import AnyProducer, Simulator
from magnetar.demo.smart_city.summary import Summary

#: How long the vehicles get, once the pipeline is done, for the last alerts to replicate back.
ALERTS_BACK_TIMEOUT_S = 30.0


class DistrictSimulator(Simulator):
    """The city's telemetry through the districts' edges (one gateway producer per edge); frames and
    clock ticks at central (the base simulator's producers, on ``client``)."""

    def __init__(
        self,
        settings: CitySettings,
        city: City,
        client: aio.Client,
        edge_clients: dict[str, aio.Client],
        district_of: dict[str, str],
        districts: Districts,
    ) -> None:
        super().__init__(settings, city, client)
        self.edge_clients = edge_clients
        self.district_of = district_of
        self.districts = districts
        self.sent_by_district: dict[str, int] = dict.fromkeys(edge_clients, 0)
        self.lags: dict[str, Lag] = {}
        self._edge_producers: dict[str, AnyProducer] = {}

    async def open(self) -> None:
        await super().open()
        for name, client in self.edge_clients.items():
            self._edge_producers[name] = await client.create_producer(
                self.settings.telemetry_topic,
                producer_name=f"city-gateway-{name}",
                batching_enabled=True,
                batching_max_publish_delay_ms=5,
                block_if_queue_full=True,
            )

    async def _telemetry(self, producer: AnyProducer) -> None:
        """As the base's, each reading to its district's edge instead of ``producer``."""
        pending = []
        for reading in self.city.readings:
            await self._sleep_until(reading.send_ms)
            district = self.district_of[reading.area]
            record = reading.record(self.start_ms)
            future = await self._edge_producers[district].send_async(
                json.dumps(record).encode(), partition_key=reading.area, event_timestamp=record["ts"]
            )
            future.add_done_callback(functools.partial(self._sent_from, kind=reading.kind, district=district))
            pending.append(future)
        await asyncio.gather(*pending, return_exceptions=True)
        for edge_producer in self._edge_producers.values():
            await edge_producer.flush()

    def _sent_from(self, future: asyncio.Future[MessageId], kind: str, district: str) -> None:
        self._sent(future, kind)
        if not future.cancelled() and future.exception() is None:
            self.sent_by_district[district] += 1

    async def before_closing_ticks(self) -> None:
        """The replication lag when the traffic stopped, and wait until every edge drained."""
        self.lags = await asyncio.to_thread(self.districts.wait_drained, self.settings.drain_timeout_s)

    async def close(self) -> None:
        await super().close()
        for edge_producer in self._edge_producers.values():
            await edge_producer.close()


class ReplicationAudit:
    """A subscription at central on the telemetry topic: what arrived from each district."""

    def __init__(self, settings: CitySettings, client: aio.Client) -> None:
        self.settings = settings
        self.client = client
        self.arrivals = Arrivals()
        self.errors: list[str] = []
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        consumer = await self.client.subscribe(
            self.settings.telemetry_topic,
            "replication-audit",
            consumer_type=aio.ConsumerType.Exclusive,
            initial_position=aio.InitialPosition.Earliest,
        )
        self._task = asyncio.create_task(self._loop(consumer))

    async def _loop(self, consumer: aio.Consumer | aio.MultiTopicsConsumer) -> None:
        while True:
            msg = await consumer.receive()
            district = msg.replicated_from()
            if district is not None:  # the clock ticks are central's own
                mid = msg.message_id()
                key = (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index())
                try:
                    record = json.loads(msg.data())
                    reading = (record["kind"], record["device"], record["ts"])
                except (ValueError, KeyError, TypeError) as exc:
                    self.errors.append(f"replication audit: unreadable message {key}: {exc}")
                else:
                    self.arrivals.add(district, key, reading)
            await consumer.acknowledge(msg)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


class DistrictJob(Job):
    """The job of ``Job`` on a central broker and N district edges."""

    def run(self) -> Summary:
        s = self.settings
        work = s.work_path() or Path(tempfile.mkdtemp(prefix="magnetar-smart-city-"))
        district_of = districts_of_areas(self.city.areas, s.districts)
        loop = LoopThread()
        districts = Districts(s, work, broker_settings(s.workers))
        pipeline = client = fanout = verifier = audit = None
        edge_clients: dict[str, aio.Client] = {}
        try:
            districts.start()
            central = districts.central
            self.say(f"central     {central.service_url} (admin {central.admin_url}), data in {work}")
            for name, edge in districts.edges.items():
                areas = ", ".join(a for a in self.city.areas if district_of[a] == name)
                self.say(f"{name:<11} {edge.service_url} (admin {edge.admin_url}), areas {areas}")
            districts.configure(self.city.areas)
            self.say("replication telemetry: each district -> central; alerts: central -> every district")
            client = loop.run(connect(central.service_url))
            for name, edge in districts.edges.items():
                edge_clients[name] = loop.run(connect(edge.service_url))
            vehicle_clients = {v.id: edge_clients[district_of[v.area]] for v in self.city.devices_of(VEHICLE)}
            fanout = AlertFanout(s, self.city, client, vehicle_clients)
            verifier = FrameVerifier(s, client)
            audit = ReplicationAudit(s, client)
            for part in (fanout, verifier, audit):
                loop.run(part.start())
            self.say(self._city_line())
            self.say("spark       starting the streaming query at central ...")
            pipeline = SparkPipeline(s, central.service_url, central.admin_url, work / "spark")
            pipeline.start()
            self.say(f"spark       query running ({s.spark_master}, trigger {s.trigger_ms} ms)")
            simulator = DistrictSimulator(s, self.city, client, edge_clients, district_of, districts)
            loop.run(simulator.open())
            self._warm_up(loop, simulator, pipeline)
            played = loop.submit(simulator.play())
            self._follow(simulator, pipeline, fanout, verifier, played)
            self._wait_delivered(simulator, audit, fanout)
            loop.run(simulator.close())
            summary = self._summary(simulator, pipeline, fanout, verifier)
            reports = self._district_reports(district_of, simulator, audit, fanout, summary)
            return dataclasses.replace(summary, districts=reports, errors=summary.errors + audit.errors)
        finally:
            if pipeline is not None:
                pipeline.stop()
            for running in (fanout, verifier, audit):
                if running is not None:
                    loop.run(running.stop())
            for c in [*edge_clients.values(), client]:
                if c is not None:
                    loop.run(c.close())
            loop.stop()
            districts.stop()
            if not s.keep_work_dir and not s.work_dir:
                shutil.rmtree(work, ignore_errors=True)

    def _wait_delivered(
        self, simulator: DistrictSimulator, audit: ReplicationAudit, fanout: AlertFanout
    ) -> None:
        """Until the audit saw every district's readings and every vehicle holds every alert of its
        area (replicated back to its edge), for at most ``ALERTS_BACK_TIMEOUT_S``."""
        deadline = time.monotonic() + ALERTS_BACK_TIMEOUT_S
        while time.monotonic() < deadline:
            audited = all(
                audit.arrivals.unique(name) >= sent for name, sent in simulator.sent_by_district.items()
            )
            if audited and not _vehicles_missing(self.city, fanout):
                return
            time.sleep(0.1)

    def _district_reports(
        self,
        district_of: dict[str, str],
        simulator: DistrictSimulator,
        audit: ReplicationAudit,
        fanout: AlertFanout,
        summary: Summary,
    ) -> list[DistrictReport]:
        alerts = fanout.control_room.alerts.values()
        missing = set(summary.vehicles_missing_alerts)
        reports = []
        for name in simulator.edge_clients:
            areas = [a for a in self.city.areas if district_of[a] == name]
            expected = {a.alert_id for a in alerts if a.area in areas}
            back = {r.alert_id for r in fanout.receipts if r.area in areas} & expected
            vehicles = [v.id for v in self.city.devices_of(VEHICLE) if v.area in areas]
            lag = simulator.lags.get(name) or Lag(0, 0.0, None, -1)
            reports.append(
                DistrictReport(
                    name=name,
                    areas=areas,
                    produced=simulator.sent_by_district[name],
                    received_total=audit.arrivals.total(name),
                    received_unique=audit.arrivals.unique(name),
                    lag=lag,
                    alerts_expected=len(expected),
                    alerts_back=len(back),
                    vehicles_missing=len(missing.intersection(vehicles)),
                )
            )
        return reports


def _vehicles_missing(city: City, fanout: AlertFanout) -> bool:
    by_area: dict[str, set[str]] = {}
    for alert in list(fanout.control_room.alerts.values()):
        by_area.setdefault(alert.area, set()).add(alert.alert_id)
    held: dict[str, set[str]] = {}
    for r in list(fanout.receipts):
        held.setdefault(r.vehicle, set()).add(r.alert_id)
    return any(not by_area.get(v.area, set()) <= held.get(v.id, set()) for v in city.devices_of(VEHICLE))
