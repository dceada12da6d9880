"""What the console shows of the broker, read from one process's state: the figures of the
broker-at-a-glance page, and a page of topics' figures. With workers each process answers for
itself (its connections, its loaded topics) and the worker that got the request adds the parts
up (``combine``), as ``/metrics`` does with its ``worker`` label.

Counters (``msgInCounter`` ...) are totals since each topic was loaded; the console works rates
out of them between two polls, so its charts move every poll rather than once per
``stats_update_frequency_seconds`` (the broker's own rate gauges, given beside them).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from magnetar.broker.replication import replication_stats

if TYPE_CHECKING:
    from magnetar.broker.nonpersistent import NonPersistentSubscription, NonPersistentTopic
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic

    AnyTopic = PersistentTopic | NonPersistentTopic

#: The figures summed over topics, over partitions and over workers.
SUMMED = (
    "msgInCounter",
    "bytesInCounter",
    "msgOutCounter",
    "bytesOutCounter",
    "msgRateIn",
    "msgRateOut",
    "msgThroughputIn",
    "msgThroughputOut",
    "backlog",
    "storageSize",
    "producers",
    "subscriptions",
    "consumers",
)
#: How many topics refusing writes the overview names (it counts them all).
REFUSING_NAMED = 20


def topic_figures(topic: AnyTopic) -> dict[str, Any]:
    """One loaded topic's figures for a row of the topic list."""
    traffic = topic.traffic
    subscriptions: list[PersistentSubscription | NonPersistentSubscription] = list(
        topic.subscriptions.values()
    )
    ml = topic.ml
    return {
        "msgInCounter": traffic.messages_in,
        "bytesInCounter": traffic.bytes_in,
        "msgOutCounter": traffic.messages_out,
        "bytesOutCounter": traffic.bytes_out,
        "msgRateIn": traffic.rate_in,
        "msgRateOut": traffic.rate_out,
        "msgThroughputIn": traffic.throughput_in,
        "msgThroughputOut": traffic.throughput_out,
        "backlog": sum(sub.cursor.backlog() for sub in subscriptions if sub.cursor is not None),
        "storageSize": ml.size_bytes() if ml is not None else 0,
        "producers": len(topic.producers),
        "subscriptions": len(subscriptions),
        "consumers": sum(len(sub.consumers) for sub in subscriptions),
        "writable": ml.writable if ml is not None else True,
    }


def add_figures(into: dict[str, Any], part: dict[str, Any]) -> None:
    """Add ``part``'s summed figures to ``into`` (a topic's to its row, a worker's to the total)."""
    for field in SUMMED:
        if field in part:
            into[field] = into.get(field, 0) + part[field]
    if "writable" in part:
        into["writable"] = into.get("writable", True) and part["writable"]


def row_figures(service: BrokerService, names: Iterable[tuple[str, int]]) -> dict[str, dict[str, Any]]:
    """The figures of the loaded ones among a page's rows (name, partition count), by row name;
    a partitioned topic's are its loaded partitions' added up. A row none of whose topics is
    loaded here is left out (the console shows it as not loaded)."""
    loaded = service.topics
    found: dict[str, dict[str, Any]] = {}
    for name, partitions in names:
        keys = [f"{name}-partition-{i}" for i in range(partitions)] if partitions else [name]
        for key in keys:
            topic = loaded.get(key)
            if topic is not None:
                add_figures(found.setdefault(name, {"loadedPartitions": 0}), topic_figures(topic))
                found[name]["loadedPartitions"] += 1
    return found


class DataDirUse:
    """The bytes the data directory's files take, walked on a thread at most every ``max_age_s``:
    the walk reads every file's size (a few per topic), cheap once in a while, not per poll."""

    def __init__(self, data_dir: Path, max_age_s: float = 10.0) -> None:
        self.data_dir = data_dir
        self.max_age_s = max_age_s
        self._bytes = 0
        self._at = -float("inf")

    def stale(self) -> bool:
        return time.monotonic() - self._at >= self.max_age_s

    def refresh(self) -> int:
        """Walk the directory (call it off the event loop); the bytes found."""
        total = 0
        for root, _, files in os.walk(self.data_dir):
            for name in files:
                try:
                    total += os.lstat(os.path.join(root, name)).st_blocks * 512
                except OSError:  # deleted while walked
                    continue
        self._bytes, self._at = total, time.monotonic()
        return total

    @property
    def bytes(self) -> int:
        return self._bytes


def _storage(service: BrokerService, used_bytes: int) -> dict[str, Any]:
    config = service.config
    try:
        disk = os.statvfs(config.data_dir)
        free, total = disk.f_bavail * disk.f_frsize, disk.f_blocks * disk.f_frsize
    except OSError:
        free = total = 0
    refusing = [
        name for name, topic in list(service.topics.items()) if topic.ml is not None and not topic.ml.writable
    ]
    low = config.min_free_disk_bytes > 0 and free < config.min_free_disk_bytes
    return {
        "dataDir": str(config.data_dir),
        "usedBytes": used_bytes,
        "freeBytes": free,
        "totalBytes": total,
        "minFreeBytes": config.min_free_disk_bytes,
        "writable": not refusing and not low and free > 0,
        "belowMinFree": low,
        "refusingCount": len(refusing),
        "refusingTopics": sorted(refusing)[:REFUSING_NAMED],
    }


def _replication(service: BrokerService) -> dict[str, dict[str, Any]]:
    """Per remote cluster: the topics replicated to it, their backlog, the largest delay, how
    many replicators are connected, and the rate out."""
    remotes: dict[str, dict[str, Any]] = {}
    for topic in list(service.topics.values()):
        if not getattr(topic, "replication_cursors", None):
            continue
        for remote, stats in replication_stats(topic).items():
            into = remotes.setdefault(
                remote, {"topics": 0, "backlog": 0, "delaySeconds": 0.0, "connected": 0, "rateOut": 0.0}
            )
            into["topics"] += 1
            into["backlog"] += stats["replicationBacklog"]
            into["delaySeconds"] = max(into["delaySeconds"], float(stats["replicationDelayInSeconds"]))
            into["connected"] += 1 if stats.get("connected") else 0
            into["rateOut"] += float(stats.get("msgRateOut", 0.0))
    return remotes


def process_overview(service: BrokerService, started_at: float, used_bytes: int) -> dict[str, Any]:
    """This process's part of the broker at a glance."""
    totals: dict[str, Any] = {}
    for topic in list(service.topics.values()):
        add_figures(totals, topic_figures(topic))
    totals.pop("writable", None)
    now = time.time()
    return {
        "worker": service.namespace_service.broker_id if service.worker is not None else None,
        "pid": os.getpid(),
        "startedAt": started_at,
        "uptimeSeconds": max(0.0, now - started_at),
        "connections": len(service.connections),
        "topicsLoaded": len(service.topics),
        **{field: totals.get(field, 0) for field in SUMMED},
        "storage": _storage(service, used_bytes),
        "replication": _replication(service),
    }


def combine(parts: list[dict[str, Any]], missing: list[str]) -> dict[str, Any]:
    """The broker at a glance from every worker's part (one part without workers): figures added
    up, storage as the data directory's (shared by the workers: the largest walk), writable only
    if every part is, replication per remote added up."""
    total: dict[str, Any] = {"connections": 0, "topicsLoaded": 0}
    for part in parts:
        add_figures(total, part)
        total["connections"] += part["connections"]
        total["topicsLoaded"] += part["topicsLoaded"]
    storage = dict(parts[0]["storage"]) if parts else {}
    remotes: dict[str, dict[str, Any]] = {}
    for part in parts[1:]:
        other = part["storage"]
        storage["usedBytes"] = max(storage["usedBytes"], other["usedBytes"])
        storage["writable"] = storage["writable"] and other["writable"]
        storage["refusingCount"] += other["refusingCount"]
        storage["refusingTopics"] = sorted(storage["refusingTopics"] + other["refusingTopics"])[
            :REFUSING_NAMED
        ]
    for part in parts:
        for remote, figures in part["replication"].items():
            into = remotes.setdefault(
                remote, {"topics": 0, "backlog": 0, "delaySeconds": 0.0, "connected": 0, "rateOut": 0.0}
            )
            for field in ("topics", "backlog", "connected", "rateOut"):
                into[field] += figures[field]
            into["delaySeconds"] = max(into["delaySeconds"], figures["delaySeconds"])
    started = min((part["startedAt"] for part in parts), default=time.time())
    return {
        "workers": parts,
        "missingWorkers": missing,
        "startedAt": started,
        "uptimeSeconds": max(0.0, time.time() - started),
        **total,
        "storage": storage,
        "replication": remotes,
    }
