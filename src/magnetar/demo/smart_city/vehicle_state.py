"""Where is each vehicle now: a compacted topic of the latest state per vehicle, read as a table view.

Every vehicle report also goes to ``city-vehicle-state``, keyed by the vehicle: its history is
every report, its compacted view the last one of each vehicle (compaction.md). After the traffic
the job compacts it with Pulsar's admin call and opens a TableView of it with our client (read
compacted: one message per vehicle). The summary shows the table view's size and a few rows, and
checks that it holds exactly the vehicles, each with the last report it sent, and that the
compacted read got one message per vehicle.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from dataclasses import dataclass, field

from magnetar.client import aio
from magnetar.client.admin import AdminClient
from magnetar.client.message import MessageId

#: Rows of the table view the summary prints.
SHOWN_ROWS = 3


@dataclass(frozen=True)
class VehicleStateReport:
    """What the summary shows of the vehicle state topic and its table view."""

    reports: int  # messages sent to the topic
    failed: int  # sends that failed
    vehicles: int  # vehicles that reported
    compacted_messages: int  # messages a compacted read of the topic got
    keys: int  # keys of the table view
    mismatched: list[str]  # vehicles whose value is not their last report (or that are missing or extra)
    compaction_s: float
    rows: list[tuple[str, dict]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.failed == 0
            and self.vehicles > 0
            and self.keys == self.vehicles == self.compacted_messages
            and not self.mismatched
        )

    def lines(self) -> list[str]:
        shown = "; ".join(
            f"{vehicle} {row.get('area')} {row.get('speed_kmh')} km/h" for vehicle, row in self.rows
        )
        return [
            f"  vehicle state       {self.reports:,} reports compacted to {self.compacted_messages} messages"
            f" in {self.compaction_s:.2f} s (one per vehicle)"
            + (f", {self.failed} failed" if self.failed else ""),
            f"    table view        {self.keys} keys for {self.vehicles} vehicles, "
            + (
                "each its last report"
                if not self.mismatched
                else f"{len(self.mismatched)} wrong: {', '.join(self.mismatched[:5])}"
            )
            + (f"; {shown}" if shown else ""),
        ]


class VehicleState:
    """The vehicles' reports into the state topic (on the job's loop), then its read-back."""

    def __init__(self, topic: str, client: aio.Client) -> None:
        self.topic = topic
        self.client = client
        #: The last report sent by each vehicle: what the table view must hold.
        self.latest: dict[str, bytes] = {}
        self.sent = 0
        self.failed = 0
        self._producer: aio.Producer | aio.PartitionedProducer | None = None
        self._pending: list[asyncio.Future[MessageId]] = []

    async def open(self) -> None:
        self._producer = await self.client.create_producer(
            self.topic,
            producer_name="city-vehicle-state",
            batching_enabled=True,
            batching_max_publish_delay_ms=5,
            block_if_queue_full=True,
        )

    async def report(self, vehicle: str, payload: bytes) -> None:
        """Queue the vehicle's report (one producer: the topic's order is the order of the calls)."""
        if self._producer is None:
            raise RuntimeError("the vehicle state topic is not open")
        future = await self._producer.send_async(payload, partition_key=vehicle)
        future.add_done_callback(functools.partial(self._sent))
        self._pending.append(future)
        self.latest[vehicle] = payload

    def _sent(self, future: asyncio.Future[MessageId]) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed += 1
        else:
            self.sent += 1

    async def close(self) -> None:
        """Wait for every receipt, then close the producer."""
        await asyncio.gather(*self._pending, return_exceptions=True)
        self._pending.clear()
        if self._producer is not None:
            await self._producer.close()
            self._producer = None

    async def read_back(self, compaction_s: float) -> VehicleStateReport:
        """The compacted read's count and the table view, against what each vehicle sent last."""
        reader = await self.client.create_reader(self.topic, MessageId.earliest, is_read_compacted=True)
        compacted = 0
        try:
            while await reader.has_message_available():
                await reader.read_next(10_000)
                compacted += 1
        finally:
            await reader.close()
        view = await self.client.create_table_view(self.topic)
        try:
            held = view.snapshot()
        finally:
            await view.close()
        wrong = sorted(v for v in self.latest.keys() | held.keys() if held.get(v) != self.latest.get(v))
        rows = [(v, json.loads(held[v])) for v in sorted(held)[:SHOWN_ROWS]]
        return VehicleStateReport(
            reports=self.sent,
            failed=self.failed,
            vehicles=len(self.latest),
            compacted_messages=compacted,
            keys=len(held),
            mismatched=wrong,
            compaction_s=compaction_s,
            rows=rows,
        )


def compact(admin: AdminClient, topic: str, timeout_s: float = 60.0) -> float:
    """Compact ``topic`` (Pulsar's admin call) and wait for the run to end; its seconds. Blocking:
    the job's thread, not the loop."""
    started = time.monotonic()
    admin.topics.trigger_compaction(topic)
    while True:
        status = admin.topics.compaction_status(topic)
        if status["status"] == "SUCCESS":
            return time.monotonic() - started
        if status["status"] == "ERROR":
            raise RuntimeError(f"compacting {topic} failed: {status.get('lastError')}")
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"compacting {topic} did not end within {timeout_s:.0f} s")
        time.sleep(0.05)
