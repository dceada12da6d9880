"""Keeping the camera frames in tiered storage (``--offload-frames``, docs/smart-city.md).

The seed's city keeps "key scenes from cameras ... for a long period of time": more than a
broker's disk holds. With the flag, the embedded broker offloads to a filesystem store (the work
directory's ``offloaded/``, or ``--offload-dir``), and the frames topic gets its own offload
policy: every closed ledger is offloaded as soon as it closes and its local copy deleted at once
(the broker's threshold stays off: the telemetry and the alerts stay local). Ledgers are kept
small (``max_ledger_size_bytes``) so that they close during a short run. At the end the job waits
until the frames topic's closed ledgers are offloaded, then reads every frame back through the
broker, which reads them from the store, and checks each one again (SHA-256 and size).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from dataclasses import dataclass
from pathlib import Path

from magnetar.client import aio
from magnetar.client.admin import AdminClient
from magnetar.demo.smart_city.settings import MIB, CitySettings

#: The frames topic's own offload policy (Pulsar's OffloadPolicies fields).
FRAMES_POLICY = {"managedLedgerOffloadThresholdInBytes": 0, "managedLedgerOffloadDeletionLagInMillis": 0}
#: How long the job waits, at the end, for the frames' closed ledgers to be offloaded.
OFFLOAD_WAIT_S = 60.0
_READ_BYTES = re.compile(r"^brk_ledgeroffloader_read_offload_bytes_total (\S+)$", re.M)


def broker_settings(store: Path) -> dict[str, object]:
    """The embedded broker's tiered storage: a filesystem store, checked every second."""
    return {
        "managed_ledger_offload_driver": "filesystem",
        "file_system_uri": str(store),
        "managed_ledger_offload_check_interval_seconds": 1.0,
        "max_ledger_size_bytes": 4 * MIB,  # a frame's chunks (up to 5 MiB each) close ledgers often
    }


@dataclass
class ArchiveReport:
    store: str
    ledgers: int = 0  # the frames topic's ledgers whose only copy is in the store
    offloaded_bytes: int = 0
    frames_expected: int = 0
    frames_read: int = 0
    frames_intact: int = 0
    #: Bytes the broker read from the store (Pulsar's brk_ledgeroffloader_read_offload_bytes).
    read_from_store_bytes: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return (
            not self.error
            and self.ledgers > 0
            and self.frames_intact == self.frames_read == self.frames_expected
            and self.read_from_store_bytes > 0
        )

    def line(self) -> str:
        said = (
            f"{self.ledgers} ledgers of the frames topic ({self.offloaded_bytes / 2**20:,.1f} MiB) offloaded"
            f" to {self.store}, local copies gone; {self.frames_intact}/{self.frames_expected} frames"
            f" read back intact ({self.read_from_store_bytes / 2**20:,.1f} MiB read from the store)"
        )
        return said + (f"; error: {self.error}" if self.error else "")


class FrameArchive:
    def __init__(self, settings: CitySettings, admin: AdminClient, client: aio.Client, store: Path) -> None:
        self.settings = settings
        self.admin = admin
        self.client = client
        self.store = store

    def configure(self) -> None:
        """The frames topic's own offload policy (before the first frame)."""
        self.admin.topics.set_offload_policies(self.settings.frames_topic, dict(FRAMES_POLICY))

    async def check(self, frames_sent: int) -> ArchiveReport:
        """Wait for the frames' closed ledgers to be offloaded, then read every frame back and check it."""
        report = ArchiveReport(str(self.store), frames_expected=frames_sent)
        try:
            closed = await asyncio.to_thread(self._offloaded)
            report.ledgers = len(closed)
            report.offloaded_bytes = sum(int(ledger["size"]) for ledger in closed)
            await self._read_back(report)
            report.read_from_store_bytes = await asyncio.to_thread(self._read_from_store)
        except Exception as exc:  # said in the summary: the run then fails its checks
            report.error = f"{type(exc).__name__}: {exc}"
        return report

    def _offloaded(self) -> list[dict]:
        """The frames topic's closed ledgers, once every one is offloaded and its local copy gone."""
        deadline = time.monotonic() + OFFLOAD_WAIT_S
        while True:
            closed = self.admin.topics.internal_stats(self.settings.frames_topic)["ledgers"][:-1]
            if closed and all(ledger.get("offloaded") and not ledger.get("local") for ledger in closed):
                return closed
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the frames topic's ledgers were not offloaded within {OFFLOAD_WAIT_S:g} s"
                )
            time.sleep(0.5)

    async def _read_back(self, report: ArchiveReport) -> None:
        consumer = await self.client.subscribe(
            self.settings.frames_topic,
            "archive-check",
            consumer_type=aio.ConsumerType.Exclusive,
            initial_position=aio.InitialPosition.Earliest,
            receiver_queue_size=8,  # chunks of up to 5 MiB each
        )
        try:
            for _ in range(report.frames_expected):
                msg = await asyncio.wait_for(consumer.receive(), OFFLOAD_WAIT_S)
                data, props = msg.data(), msg.properties()
                digest = await asyncio.to_thread(_sha256_hex, data)
                report.frames_read += 1
                if digest == props.get("sha256") and str(len(data)) == props.get("size"):
                    report.frames_intact += 1
                await consumer.acknowledge(msg)
        finally:
            await consumer.close()

    def _read_from_store(self) -> int:
        body, _ = self.admin.request_bytes("GET", "/metrics")
        found = _READ_BYTES.search(body.decode())
        return int(float(found.group(1))) if found else 0


def _sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
