"""The main job: an embedded broker, the city, the Spark pipeline, the fan-out, a summary.

    simulator ──► city-telemetry (partitioned) ──► Spark: windows, watermark, rule ──► city-alerts-<area>
         │                                                                                  │
         └──► city-frames (chunked, 6-12 MB) ──► frame verifier           vehicles of the area ◄┘

Everything that talks to the broker runs as asyncio tasks on one background loop thread
(our asyncio client); the Spark driver and the progress lines run on the calling thread.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from magnetar.client import aio
from magnetar.client.errors import ServerError
from magnetar.demo.smart_city import archive
from magnetar.demo.smart_city.broker import EmbeddedBroker
from magnetar.demo.smart_city.city import CAMERA, SENSOR, VEHICLE, City, build_city
from magnetar.demo.smart_city.detection import reference_alerts
from magnetar.demo.smart_city.fanout import AlertFanout, Receipt
from magnetar.demo.smart_city.frames import FrameVerifier
from magnetar.demo.smart_city.mqtt_vehicles import MqttVehicles
from magnetar.demo.smart_city.pipeline import SparkPipeline, rule_of
from magnetar.demo.smart_city.runtime import LoopThread, broker_settings, connect, try_subscribe
from magnetar.demo.smart_city.security import PIPELINE_ROLE, Admin, ClientOptions, SecureCity, vehicle_role
from magnetar.demo.smart_city.settings import CitySettings
from magnetar.demo.smart_city.simulator import Simulator
from magnetar.demo.smart_city.summary import Latency, Summary
from magnetar.demo.smart_city.vehicle_state import VehicleState, VehicleStateReport, compact


class Job:
    def __init__(self, settings: CitySettings, out: TextIO = sys.stdout) -> None:
        settings.validate()
        self.settings = settings
        self.out = out
        self.city: City = build_city(settings)
        self.started = time.monotonic()
        self.drained = False
        self.warm_up_rows = 0
        self.errors: list[str] = []
        self.secure: SecureCity | None = None
        self.refusal = ""
        self.refused = False
        #: ``--mqtt``: the vehicles as MQTT clients.
        self.mqtt: MqttVehicles | None = None

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def run(self) -> Summary:
        s = self.settings
        work = s.work_path() or Path(tempfile.mkdtemp(prefix="magnetar-smart-city-"))
        settings = broker_settings(s.workers)
        store = Path(s.offload_dir) if s.offload_dir else work / "offloaded"
        if s.offload_frames:
            settings |= archive.broker_settings(store)
        if s.secure:
            vehicle_ids = [v.id for v in self.city.devices_of(VEHICLE)]
            self.secure = SecureCity.create(work / "secure", vehicle_ids)
            settings |= self.secure.broker_settings()
        if s.mqtt:  # MQTT over TLS only when secured, as every other port then
            settings["mqtts_port" if self.secure is not None else "mqtt_port"] = 0
        loop = LoopThread()
        broker = EmbeddedBroker(work / "broker", settings)
        pipeline = client = fanout = verifier = None
        vehicle_clients: dict[str, aio.Client] = {}
        try:
            broker.start()
            if self.secure is not None:  # TLS only: the broker serves no plain port
                service_url, admin_url = broker.service_url_tls, broker.https_url
            else:
                service_url, admin_url = broker.service_url, broker.admin_url
            workers = f", {s.workers} workers" if s.workers > 1 else ""
            self.say(f"broker      {service_url} (admin {admin_url}), data in {work}{workers}")
            admin = Admin(admin_url, self.secure)
            admin.create_namespace(s.namespace, exist_ok=True)  # public/default always exists
            admin.create_partitioned_topic(s.telemetry_topic, s.partitions)
            client = loop.run(connect(service_url, self._options_for(None)))
            frame_archive = archive.FrameArchive(s, admin, client, store) if s.offload_frames else None
            if frame_archive is not None:
                frame_archive.configure()
                self.say(f"archive     the frames topic's closed ledgers are offloaded to {store}")
            if s.mqtt:
                self.mqtt = self._mqtt_vehicles(loop, broker, admin)
            elif self.secure is not None:
                vehicle_clients = self._secure_vehicles(loop, admin, service_url)
            fanout = AlertFanout(s, self.city, client, vehicle_clients, self.mqtt)
            verifier = FrameVerifier(s, client)
            loop.run(fanout.start())
            loop.run(verifier.start())
            self.say(self._city_line())
            self.say("spark       starting the streaming query ...")
            spark_options = self.secure.spark_options() if self.secure is not None else None
            pipeline = SparkPipeline(s, service_url, admin_url, work / "spark", spark_options)
            pipeline.start()
            self.say(f"spark       query running ({s.spark_master}, trigger {s.trigger_ms} ms)")
            simulator = Simulator(s, self.city, client, self.mqtt)
            simulator.vehicle_state = state = VehicleState(s.vehicle_state_topic, client)
            loop.run(state.open())
            loop.run(simulator.open())
            self._warm_up(loop, simulator, pipeline)
            played = loop.submit(simulator.play())
            self._follow(simulator, pipeline, fanout, verifier, played)
            loop.run(simulator.close())
            loop.run(state.close())
            summary = self._summary(simulator, pipeline, fanout, verifier)
            try:
                summary.vehicle_state = self._vehicle_state(loop, admin, state)
            except Exception as exc:  # the summary says so, and the run fails
                summary.errors.append(f"vehicle state: {type(exc).__name__}: {exc}")
            if frame_archive is not None:
                self.say("archive     waiting for the frames' ledgers to be offloaded, then reading back")
                summary.archive = loop.run(frame_archive.check(simulator.counters.frames_sent))
            summary.wall_s = time.monotonic() - self.started
            return summary
        finally:
            if pipeline is not None:
                if s.keep_work_dir or s.work_dir:
                    (work / "spark-progress.json").write_text(
                        json.dumps(pipeline.progress, indent=1, default=str)
                    )
                pipeline.stop()
            for part in (fanout, verifier, self.mqtt):
                if part is not None:
                    loop.run(part.stop())
            for c in [*vehicle_clients.values(), client]:
                if c is not None:
                    loop.run(c.close())
            loop.stop()
            broker.stop()
            if not s.keep_work_dir and not s.work_dir:
                shutil.rmtree(work, ignore_errors=True)

    def _vehicle_state(self, loop: LoopThread, admin: Admin, state: VehicleState) -> VehicleStateReport:
        """Compact the vehicle state topic, then read it back as a table view."""
        seconds = compact(admin, state.topic)
        report = loop.run(state.read_back(seconds))
        self.say(f"state       {state.topic} compacted in {seconds:.2f} s; table view of {report.keys} keys")
        return report

    def _options_for(self, vehicle: str | None) -> ClientOptions | None:
        """Our client's options: the pipeline's role (vehicle None) or the vehicle's own, secured."""
        if self.secure is None:
            return None
        token = self.secure.pipeline_token if vehicle is None else self.secure.vehicle_tokens[vehicle]
        return self.secure.client_options(token)

    def _secure_vehicles(self, loop: LoopThread, admin: Admin, service_url: str) -> dict[str, aio.Client]:
        """Grant each vehicle's role ``consume`` on its area's alerts topic only, give each vehicle
        its own client, and check that one vehicle is refused another area's alerts."""
        s = self.settings
        vehicles = self.city.devices_of(VEHICLE)
        for v in vehicles:
            admin.grant_permission(s.alerts_topic(v.area), vehicle_role(v.id), ["consume"])
        clients = {v.id: loop.run(connect(service_url, self._options_for(v.id))) for v in vehicles}
        self.say(
            f"secure      TLS + tokens; {len(vehicles)} vehicle roles, each granted consume on its "
            "area's alerts topic only"
        )
        others = [a for a in self.city.areas if vehicles and a != vehicles[0].area]
        if not others:
            self.refusal, self.refused = "no other area to try", True
            return clients
        vehicle, other = vehicles[0], s.alerts_topic(others[0])
        outcome = loop.run(try_subscribe(clients[vehicle.id], other, f"probe-{vehicle.id}"))
        role = vehicle_role(vehicle.id)
        if isinstance(outcome, ServerError) and "AuthorizationError" in str(outcome):
            self.refused = True
            self.refusal = f"{role} subscribing to {other}: refused ({outcome})"
        else:
            self.refusal = f"{role} subscribing to {other}: NOT refused ({outcome})"
            self.errors.append(self.refusal)
        self.say(f"secure      {self.refusal}")
        return clients

    def _mqtt_vehicles(self, loop: LoopThread, broker: EmbeddedBroker, admin: Admin) -> MqttVehicles:
        """Every vehicle as an MQTT client; secured, each vehicle's role is granted consume on its
        area's alerts topic and produce on the telemetry, and one vehicle must be refused another
        area's alerts (SUBACK 0x87 Not authorized)."""
        s = self.settings
        vehicles = self.city.devices_of(VEHICLE)
        port = broker.mqtts_port if self.secure is not None else broker.mqtt_port
        assert port is not None
        if self.secure is not None:
            for v in vehicles:
                admin.grant_permission(s.alerts_topic(v.area), vehicle_role(v.id), ["consume"])
                admin.grant_permission(s.telemetry_topic, vehicle_role(v.id), ["produce"])
        mqtt = MqttVehicles(s, self.city, port, self.secure)
        loop.run(mqtt.start())
        self.say(
            f"mqtt        {len(vehicles)} vehicles on {mqtt.url} (paho-mqtt, MQTT 5.0): telemetry at "
            "QoS 1, each subscribed to its area's alerts"
            + (" with its own token (consume its alerts, produce telemetry)" if self.secure else "")
        )
        others = [a for a in self.city.areas if vehicles and a != vehicles[0].area]
        if self.secure is not None and others:
            vehicle, other = vehicles[0], s.alerts_topic(others[0])
            code = loop.run(mqtt.subscribe(vehicle.id, other))
            self.refused = code == 0x87
            verdict = "refused (SUBACK 0x87 Not authorized)" if self.refused else f"NOT refused ({code:#x})"
            self.refusal = f"{vehicle_role(vehicle.id)} subscribing over MQTT to {other}: {verdict}"
            if not self.refused:
                self.errors.append(self.refusal)
            self.say(f"secure      {self.refusal}")
        elif self.secure is not None:
            self.refusal, self.refused = "no other area to try", True
        return mqtt

    def _city_line(self) -> str:
        c, s = self.city, self.settings
        return (
            f"city        {len(c.areas)} areas, {len(c.devices_of(VEHICLE))} vehicles, "
            f"{len(c.devices_of(SENSOR))} sensors, {len(c.devices_of(CAMERA))} cameras; "
            f"{len(c.readings):,} readings and {len(c.frames)} frames over {s.duration_s:.0f} s"
        )

    def _warm_up(self, loop: LoopThread, simulator: Simulator, pipeline: SparkPipeline) -> None:
        """A tick in the past, and wait for the query's first micro-batch (Python workers start)."""
        loop.run(simulator.send_ticks(int(time.time() * 1000) - 60_000))
        deadline = time.monotonic() + 180
        while pipeline.rows_read < simulator.counters.ticks_sent:
            if time.monotonic() > deadline:
                raise RuntimeError("the streaming query did not run its first micro-batch within 180 s")
            time.sleep(0.2)
            pipeline.poll()
        simulator.counters.ticks_sent = 0
        self.warm_up_rows = pipeline.rows_read
        self.say(
            f"spark       first micro-batch done; the city starts ({time.monotonic() - self.started:.1f} s)"
        )

    def _follow(self, simulator, pipeline, fanout, verifier, played) -> None:
        """Progress lines while the city plays, then wait until every window was reported.

        The pipeline is done once a micro-batch ran with a watermark past the last window's
        end (that batch reported every window); then the alerts get a moment to arrive.
        """
        s = self.settings
        next_line = time.monotonic() + s.progress_interval_s
        drain_deadline = None
        while True:
            time.sleep(0.25)
            pipeline.poll()
            now = time.monotonic()
            if not s.quiet and now >= next_line:
                self.say(self._progress(simulator, pipeline, fanout, verifier))
                next_line = now + s.progress_interval_s
            if not played.done():
                continue
            if drain_deadline is None:
                played.result()  # raise what the simulator raised
                drain_deadline = now + s.drain_timeout_s
            if now > drain_deadline:
                return
            if pipeline.watermark_ms < simulator.last_window_end_ms:
                continue
            if len(verifier.checks) < simulator.counters.frames_sent:
                continue
            if time.monotonic() - fanout.control_room.last_received >= 1.0:
                self.drained = True
                return

    def _progress(self, simulator, pipeline, fanout, verifier) -> str:
        c = simulator.counters
        return (
            f"[{time.monotonic() - self.started:6.1f}s] events in {c.events_sent:,} | spark read "
            f"{pipeline.rows_read - self.warm_up_rows:,} ({pipeline.batches} batches) | alerts out "
            f"{len(fanout.control_room.alerts)} | vehicle receipts {len(fanout.receipts)} | frames "
            f"{verifier.intact}/{c.frames_sent} delivered intact ({len(self.city.frames)} planned)"
        )

    def _summary(self, simulator, pipeline, fanout, verifier) -> Summary:
        c, city, s = simulator.counters, self.city, self.settings
        fanout.resolve_published()
        records = [r.record(simulator.start_ms) for r in city.readings] + simulator.frame_records
        expected = {a.alert_id for a in reference_alerts(records, rule_of(s), s.window_ms)}
        room = fanout.control_room
        got = set(room.alerts)
        alerts_by_area = Counter(a.area for a in room.alerts.values())
        # Every vehicle must hold every alert of its area.
        held: dict[str, set[str]] = {}
        for r in fanout.receipts:
            held.setdefault(r.vehicle, set()).add(r.alert_id)
        by_area: dict[str, set[str]] = {}
        for alert in room.alerts.values():
            by_area.setdefault(alert.area, set()).add(alert.alert_id)
        vehicles = city.devices_of(VEHICLE)
        missing = [v.id for v in vehicles if not by_area.get(v.area, set()) <= held.get(v.id, set())]
        expected_receipts = sum(len(by_area.get(v.area, ())) for v in vehicles)
        first_receipts: dict[tuple[str, str], Receipt] = {}
        for r in fanout.receipts:
            first_receipts.setdefault((r.vehicle, r.alert_id), r)
        receipts = list(first_receipts.values())
        frames_ok = {ch.index for ch in verifier.checks if ch.intact}
        return Summary(
            areas=list(city.areas),
            damaged_areas=sorted(city.damaged),
            vehicles=len(vehicles),
            sensors=len(city.devices_of(SENSOR)),
            cameras=len(city.devices_of(CAMERA)),
            events_in=c.events_sent,
            events_by_kind=dict(c.by_kind),
            events_failed=c.events_failed,
            spark_rows_read=pipeline.rows_read - self.warm_up_rows,
            spark_batches=pipeline.batches,
            spark_rows_late=pipeline.rows_late,
            alerts_out=len(got),
            alerts_by_area=dict(alerts_by_area),
            duplicate_alerts=room.duplicates,
            expected_alerts=len(expected),
            missing_alerts=sorted(expected - got),
            unexpected_alerts=sorted(got - expected),
            receipts=len(receipts),
            expected_receipts=expected_receipts,
            vehicles_missing_alerts=missing,
            latency=Latency.of([r.latency_ms for r in receipts]),
            latency_samples_ms=[float(r.latency_ms) for r in receipts],
            pipeline_latency=Latency.of([r.pipeline_ms for r in receipts]),
            broadcast_latency=Latency.of([r.broadcast_ms for r in receipts]),
            frames_sent=c.frames_sent,
            frames_planned=len(city.frames),
            frames_intact=len(frames_ok),
            frames_corrupt=verifier.corrupt,
            frame_bytes=verifier.bytes_intact,
            frame_latency=Latency.of([ch.latency_ms for ch in verifier.checks]),
            wall_s=time.monotonic() - self.started,
            drained=self.drained,
            errors=fanout.all_errors + self.errors,
            security=self._security_line(),
            refusal=self.refusal,
            refused=self.refused,
            mqtt=self._mqtt_line(),
        )

    def _mqtt_line(self) -> str:
        if self.mqtt is None:
            return ""
        return (
            f"{len(self.city.devices_of(VEHICLE))} vehicles on {self.mqtt.url}: "
            f"{self.mqtt.acknowledged:,} readings PUBACKed (QoS 1), {len(self.mqtt.receipts)} alerts received"
        )

    def _security_line(self) -> str:
        if self.secure is None:
            return ""
        return (
            "TLS only (pulsar+ssl://, https://"
            + (", mqtts://" if self.mqtt is not None else "")
            + ", hostname checked; no plain ports), "
            "token authentication, authorization: "
            f"superuser {PIPELINE_ROLE}, "
            f"{len(self.secure.vehicle_tokens)} vehicle roles"
        )
