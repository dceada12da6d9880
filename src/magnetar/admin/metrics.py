"""``GET /metrics``: the broker's state in Prometheus' text format, under Pulsar's metric names.

Every value is read from the broker's own state when scraped (a collector, not counters
bumped on the send path), so metrics cost nothing between scrapes. Names follow Pulsar's
where Pulsar has one (``pulsar_active_connections``, ``pulsar_broker_throttled_connections``,
``pulsar_msg_backlog`` ...), so its dashboards and alerts work; ``magnetar_`` ones are ours.

A scrape does not stall the loop with many topics loaded (issue 40: 100,000): the topics' values
are read on the loop a slice at a time (``topic_slices``), as plain numbers (``TopicValues``),
and the page is made from them off the loop (``page``).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Collection, Iterator, Mapping
from operator import attrgetter
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from magnetar.admin import spread_stats
from magnetar.broker.descriptors import EXHAUSTION
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.dispatchers.broadcast_stats import largest_lag
from magnetar.broker.flow_control import Hold, no_holds
from magnetar.broker.follower_topic import link_worker
from magnetar.broker.replication import replication_stats
from magnetar.broker.topic_slices import READ_SLICE, in_slices

if TYPE_CHECKING:
    from magnetar.admin.every_worker import Part
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

#: A topic's traffic (broker/traffic.py), metric: (Traffic field, help). The rates are gauges over
#: the last stats interval; the counters are totals since the topic was loaded.
_RATES = {
    "pulsar_rate_in": ("rate_in", "Messages per second in"),
    "pulsar_rate_out": ("rate_out", "Messages per second dispatched"),
    "pulsar_throughput_in": ("throughput_in", "Bytes per second in"),
    "pulsar_throughput_out": ("throughput_out", "Bytes per second dispatched"),
}
_COUNTERS = {
    "pulsar_in_messages": ("messages_in", "Messages producers sent to the topic"),
    "pulsar_in_bytes": ("bytes_in", "Bytes producers sent to the topic (headers and payload)"),
    "pulsar_out_messages": ("messages_out", "Messages dispatched to the topic's consumers"),
    "pulsar_out_bytes": ("bytes_out", "Bytes dispatched to the topic's consumers"),
}
#: The ``reason`` label of the flow-control metrics.
_REASONS = {
    Hold.WRITES: "writes",
    Hold.SENDS: "pending_sends",
    Hold.BROKER: "publish_buffer",
    Hold.FRAMES: "frame_buffer",
}


class BrokerCollector(Collector):
    """The broker-wide metrics (connections, the disk, topic counts, refusals): few, read at once."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        yield from self._connections()
        yield from self._disk()
        yield from self._topic_counts()
        yield from self._offload()

    def _topic_counts(self) -> Iterator[Metric]:
        service = self.service
        yield GaugeMetricFamily("magnetar_topics_loaded", "Topics loaded now", value=len(service.topics))
        yield CounterMetricFamily(
            "magnetar_inactive_topics_unloaded",
            "Topics unloaded because nobody used them (broker_unload_inactive_topics_seconds)",
            value=service.inactive_topics.unloaded,
        )
        yield CounterMetricFamily(
            "magnetar_inactive_topics_deleted",
            "Topics deleted by an inactive-topic policy (nobody used them)",
            value=service.inactive_topics.deleted,
        )

    def _offload(self) -> Iterator[Metric]:
        """Tiered storage, broker-wide, under Pulsar's offloader metric names where they exist."""
        offloader = self.service.offloads.offloader
        if offloader is None:
            return
        done, reads = offloader.figures, self.service.storage.tiered.figures
        for name, text, value in (
            ("brk_ledgeroffloader_offload_error", "Ledger offloads that failed (retried later)", done.errors),
            (
                "brk_ledgeroffloader_offload_bytes",
                "Bytes offloaded to the object store (verified)",
                done.bytes,
            ),
            ("brk_ledgeroffloader_read_offload_error", "Reads of offloaded data that failed", reads.failures),
            (
                "brk_ledgeroffloader_read_offload_bytes",
                "Bytes read back from the object store",
                reads.fetched_bytes,
            ),
            (
                "brk_ledgeroffloader_delete_offload_ops",
                "Objects deleted from the object store",
                done.deleted_objects,
            ),
            ("magnetar_offload_ledgers", "Ledgers offloaded and verified", done.ledgers),
            (
                "magnetar_offload_seconds",
                "Seconds spent offloading ledgers (upload and verification)",
                done.seconds,
            ),
            ("magnetar_offload_read_fetches", "Range reads from the object store", reads.fetches),
            (
                "magnetar_offload_read_seconds",
                "Seconds spent in range reads from the object store",
                reads.fetch_seconds,
            ),
        ):
            yield CounterMetricFamily(name, text, value=value)
        yield GaugeMetricFamily(
            "magnetar_offload_read_cache_bytes",
            "Offloaded data held in the read-ahead cache",
            value=self.service.storage.tiered.cached_bytes,
        )

    def _disk(self) -> Iterator[Metric]:
        try:
            st = os.statvfs(self.service.config.data_dir)
        except OSError:
            return
        yield GaugeMetricFamily(
            "magnetar_data_dir_free_bytes",
            "Bytes free for the broker on the data directory's filesystem",
            value=st.f_bavail * st.f_frsize,
        )

    def _connections(self) -> Iterator[Metric]:
        service = self.service
        connections = list(service.connections)
        yield GaugeMetricFamily(
            "pulsar_active_connections", "Client connections open now", value=len(connections)
        )
        held = no_holds()
        for cnx in connections:
            for reason in Hold.ALL:
                if cnx.holds.held & reason:
                    held[reason] += 1
        yield GaugeMetricFamily(
            "pulsar_broker_throttled_connections",
            "Connections not read because too many of their sends await receipts",
            value=held[Hold.SENDS],
        )
        yield GaugeMetricFamily(
            "pulsar_broker_throttled_connections_global_limit",
            "Connections not read because the broker's publish buffer is full",
            value=held[Hold.BROKER],
        )
        now = GaugeMetricFamily(
            "magnetar_connections_not_read", "Connections not read now, by reason", labels=["reason"]
        )
        total = CounterMetricFamily(
            "magnetar_connection_holds", "Times a connection stopped being read, by reason", labels=["reason"]
        )
        for reason, label in _REASONS.items():
            now.add_metric([label], held[reason])
            total.add_metric([label], service.hold_times[reason])
        yield now
        yield total
        yield GaugeMetricFamily(
            "magnetar_publish_buffer_bytes",
            "Bytes of the sends awaiting their receipts, all connections together",
            value=service.publish_buffer.bytes,
        )
        yield GaugeMetricFamily(
            "magnetar_publish_buffer_limit_bytes",
            "max_message_publish_buffer_bytes (0: no limit)",
            value=service.publish_buffer.limit,
        )
        yield CounterMetricFamily(
            "magnetar_publish_buffer_full",
            "Times the publish buffer went over its limit",
            value=service.publish_buffer.times_full,
        )
        yield from self._incomplete_frames()
        yield from self._refusals()

    def _incomplete_frames(self) -> Iterator[Metric]:
        service = self.service
        budget = service.frame_budget
        yield GaugeMetricFamily(
            "magnetar_incomplete_frames_bytes",
            "Bytes set aside for large frames being received, all connections together",
            value=budget.bytes,
        )
        yield GaugeMetricFamily(
            "magnetar_incomplete_frames_limit_bytes",
            "max_incomplete_frame_bytes (0: no limit)",
            value=budget.limit,
        )
        yield GaugeMetricFamily(
            "magnetar_incomplete_frames_waiting",
            "Connections waiting for room to receive a large frame",
            value=len(budget.waiters),
        )
        yield CounterMetricFamily(
            "magnetar_incomplete_frames_full",
            "Times a large frame had to wait for room (max_incomplete_frame_bytes reached)",
            value=budget.times_full,
        )

    def _refusals(self) -> Iterator[Metric]:
        """What the broker refused or closed, and authentication's outcomes, by reason."""
        service = self.service
        yield counts_by(
            "magnetar_frame_closes",
            "Connections closed over a frame: too large (before CONNECT or after), or stalled",
            "reason",
            service.frame_closes,
        )
        for outcome, counts in (
            ("success", service.authentication_successes),
            ("failures", service.authentication_failures),
        ):
            yield counts_by(
                f"pulsar_authentication_{outcome}",
                f"Authentication {outcome} (CONNECT and AUTH_RESPONSE; failures also expiry), by method",
                "auth_method",
                counts,
            )
        yield counts_by(
            "magnetar_authorization_failures",
            "Requests refused for want of a permission (AuthorizationError, admin 403), by operation",
            "operation",
            service.authorization_failures,
        )
        yield counts_by(
            "magnetar_out_of_file_descriptors",
            "Connections, topics and subscriptions refused because file descriptors ran short",
            "what",
            EXHAUSTION.counts,
        )
        yield counts_by(
            "magnetar_send_refusals",
            "Sends not stored, by the SEND_ERROR answered, or StorageRefused (a full disk, a failed"
            " fsync: the producer is closed and its client fails the send)",
            "reason",
            service.send_refusals,
        )
        yield counts_by(
            "magnetar_limit_refusals",
            "Connections, producers, consumers and topics refused over a configured limit, by its setting",
            "limit",
            service.limits.refusals.counts,
        )


def _traffic(field: str):
    get = attrgetter(field)
    return lambda topic: get(topic.traffic)


#: A topic's metrics: (family, name, help, its value for a topic, only for persistent topics),
#: in the order /metrics lists them.
_TOPIC_METRICS = [
    (
        GaugeMetricFamily,
        "pulsar_producers_count",
        "Producers of the topic",
        lambda t: len(t.producers),
        False,
    ),
    (
        GaugeMetricFamily,
        "pulsar_subscriptions_count",
        "Subscriptions of the topic",
        lambda t: len(t.subscriptions),
        False,
    ),
    (
        GaugeMetricFamily,
        "pulsar_consumers_count",
        "Consumers of the topic",
        lambda t: sum(len(sub.consumers) for sub in list(t.subscriptions.values())),
        False,
    ),
    (
        GaugeMetricFamily,
        "pulsar_msg_backlog",
        "Messages not yet acknowledged, all subscriptions together",
        lambda t: sum(sub.cursor.backlog() for sub in list(t.subscriptions.values())),
        True,
    ),
    (
        GaugeMetricFamily,
        "pulsar_storage_size",
        "Bytes the topic's ledgers take",
        lambda t: t.ml.size_bytes(),
        True,
    ),
    (
        CounterMetricFamily,
        "magnetar_storage_damaged_entries",
        "Entries passed over because their records are damaged, since the topic was loaded",
        lambda t: t.ml.damage.damaged_entries,
        True,
    ),
    (
        CounterMetricFamily,
        "magnetar_storage_dropped_tails",
        "Torn or damaged log tails that recovery cut off (their bytes kept aside)",
        lambda t: t.ml.damage.dropped_tails,
        True,
    ),
    (
        CounterMetricFamily,
        "magnetar_storage_damaged_bytes",
        "Bytes of damaged records and of the tails cut off",
        lambda t: t.ml.damage.damaged_bytes,
        True,
    ),
    (
        CounterMetricFamily,
        "magnetar_storage_write_errors",
        "Sends the topic's storage refused or failed (a full disk, an I/O error) since it was loaded",
        lambda t: t.ml.write_errors,
        True,
    ),
    (
        GaugeMetricFamily,
        "magnetar_storage_writable",
        "1 while the topic's storage accepts writes, 0 while it refuses them (a full disk ...)",
        lambda t: 1 if t.ml.writable else 0,
        True,
    ),
    *(
        (GaugeMetricFamily, name, f"{text}, over the last stats interval", _traffic(field), False)
        for name, (field, text) in _RATES.items()
    ),
    *((CounterMetricFamily, name, text, _traffic(field), False) for name, (field, text) in _COUNTERS.items()),
]


#: A topic's compaction metrics, Pulsar's names (gauges in Pulsar too): (name, help, its value).
_COMPACTION_METRICS = [
    (
        "pulsar_compaction_removed_event_count",
        "Messages compactions removed (superseded or deleted), since the topic was loaded",
        lambda c: c.record.removed_event_count,
    ),
    (
        "pulsar_compaction_succeed_count",
        "Compactions that succeeded, since the topic was loaded",
        lambda c: c.record.succeed_count,
    ),
    (
        "pulsar_compaction_failed_count",
        "Compactions that failed, since the topic was loaded",
        lambda c: c.record.failed_count,
    ),
    (
        "pulsar_compaction_duration_time_in_mills",
        "Milliseconds compactions took, all together, since the topic was loaded",
        lambda c: c.record.duration_ms,
    ),
    (
        "pulsar_compaction_read_throughput",
        "Bytes per second compactions read, over the last stats interval",
        lambda c: c.record.read_throughput,
    ),
    (
        "pulsar_compaction_write_throughput",
        "Bytes per second compactions wrote to compacted ledgers, over the last stats interval",
        lambda c: c.record.write_throughput,
    ),
    (
        "pulsar_compaction_compacted_entries_count",
        "Entries of the topic's compacted ledger",
        lambda c: c.view.ledger.entries if c.view is not None else 0,
    ),
    (
        "pulsar_compaction_compacted_entries_size",
        "Bytes of the topic's compacted ledger",
        lambda c: c.view.ledger.size_bytes if c.view is not None else 0,
    ),
]

_NAMES = [metric for _, metric, _, _, _ in _TOPIC_METRICS]
#: Where ``pulsar_consumers_count`` is among them.
_CONSUMERS = _NAMES.index("pulsar_consumers_count")
#: Where the deliveries are among them, and their Traffic fields (a spread topic's are counted by
#: the worker serving the consumers: ``TopicValues.add_followed``).
_OUT_FIELDS = [
    (_NAMES.index(name), field)
    for name, (field, _) in (*_RATES.items(), *_COUNTERS.items())
    if field in ("rate_out", "throughput_out", "messages_out", "bytes_out")
]

#: A broadcast subscription's metrics: (family, name, help, its dispatcher.stats() field).
_BROADCAST_METRICS = [
    (GaugeMetricFamily, "magnetar_broadcast_consumers", "Broadcast consumers connected", "virtualCursors"),
    (
        GaugeMetricFamily,
        "magnetar_broadcast_detached_cursors",
        "Virtual cursors kept for broadcast consumers whose connection was lost (reconnect grace)",
        "detachedCursors",
    ),
    (
        CounterMetricFamily,
        "magnetar_broadcast_entry_reads",
        "Reads from the entry cache or files, shared by the consumers at one position",
        "entryReads",
    ),
    (CounterMetricFamily, "magnetar_broadcast_entries_read", "Entries those reads returned", "entriesRead"),
    (
        CounterMetricFamily,
        "magnetar_broadcast_lag_disconnects",
        "Consumers closed and detached virtual cursors given up by the lag policy",
        "lagDisconnects",
    ),
    (
        CounterMetricFamily,
        "magnetar_broadcast_virtual_cursor_flushes",
        "Flushes that wrote changed virtual cursors to storage",
        "virtualCursorFlushes",
    ),
    (
        CounterMetricFamily,
        "magnetar_broadcast_virtual_cursors_written",
        "Virtual cursors written",
        "virtualCursorsWritten",
    ),
]


def broadcast_metrics(topics, cluster: str) -> Iterator[Metric]:
    """``magnetar_broadcast_*`` per persistent broadcast subscription of ``topics`` (at once)."""
    values = TopicValues(per_topic=True)
    for key, topic in list(topics.items()):
        values.add(key, topic, cluster)
    return values.broadcast_families()


#: A replicator's metrics, Pulsar's names: (family, name, help, its stats() field).
_REPLICATION_METRICS = [
    (
        GaugeMetricFamily,
        "pulsar_replication_rate_out",
        "Messages per second sent to the remote",
        "msgRateOut",
    ),
    (
        GaugeMetricFamily,
        "pulsar_replication_throughput_out",
        "Bytes per second sent to the remote",
        "msgThroughputOut",
    ),
    (GaugeMetricFamily, "pulsar_replication_backlog", "Messages not yet replicated", "replicationBacklog"),
    (
        GaugeMetricFamily,
        "pulsar_replication_connected_count",
        "1 while the replicator's producer is connected to the remote",
        "connected",
    ),
    (
        GaugeMetricFamily,
        "pulsar_replication_delay_in_seconds",
        "Age of the oldest message not yet replicated",
        "replicationDelayInSeconds",
    ),
    (CounterMetricFamily, "magnetar_replication_out_messages", "Messages the remote stored", "msgOutCount"),
    (CounterMetricFamily, "magnetar_replication_out_bytes", "Bytes the remote stored", "bytesOutCount"),
]


def counts_by(name: str, documentation: str, label: str, counts: Mapping[str, int]) -> CounterMetricFamily:
    """A counter with one sample per key of ``counts`` (the key as the value of ``label``)."""
    family = CounterMetricFamily(name, documentation, labels=[label])
    for key, count in counts.items():
        family.add_metric([key], count)
    return family


class TopicValues:
    """The loaded topics' values for a scrape, as plain numbers: read on the loop (``add``, a
    slice at a time), made into metric families off it (``collect``). ``per_topic``: each topic's
    own series, or (Pulsar's exposeTopicLevelMetricsInPrometheus off) one per namespace, the sum
    of its loaded topics' values."""

    def __init__(self, per_topic: bool, spread: Collection[str] = ()) -> None:
        self.per_topic = per_topic
        #: The spread topics (spread_stats.py): at their owner, the other workers' links are not
        #: consumers; each worker counts those it serves (``add_followed``).
        self.spread = spread
        #: (cluster, namespace[, topic]): each of ``_TOPIC_METRICS``' values (None: not one of
        #: these topics' metrics).
        self.rows: dict[tuple[str, ...], list[float | None]] = {}
        #: ``_COMPACTION_METRICS``' values of each topic compacted (since it was loaded, or with a
        #: compacted view: Pulsar lists only those), by the same keys as ``rows``.
        self.compaction: dict[tuple[str, ...], list[float]] = {}
        #: Per broadcast subscription: its labels, its dispatcher's stats, messages out, largest lag.
        self.broadcast: list[tuple[list[str], dict, float, float]] = []
        #: Per replicated topic and remote cluster: its labels and the replicator's stats.
        self.replication: list[tuple[list[str], dict]] = []

    def _row(self, key: str, topic, cluster: str) -> tuple[tuple[str, ...], list[float | None]]:
        namespace = str(topic.name.namespace_name)
        row_key: tuple[str, ...] = (cluster, namespace, key) if self.per_topic else (cluster, namespace)
        sums = self.rows.get(row_key)
        if sums is None:
            sums = self.rows[row_key] = [None] * len(_TOPIC_METRICS)
        return row_key, sums

    def add(self, key: str, topic, cluster: str) -> None:
        """Read ``topic``'s values (on the loop: its state is the loop's)."""
        namespace = str(topic.name.namespace_name)
        row_key, sums = self._row(key, topic, cluster)
        persistent = topic.ml is not None
        for i, (_, _, _, value, persistent_only) in enumerate(_TOPIC_METRICS):
            if persistent or not persistent_only:
                sums[i] = (sums[i] or 0) + value(topic)
        links = {}
        if key in self.spread:
            links = {name: spread_stats.links(sub) for name, sub in list(topic.subscriptions.items())}
            sums[_CONSUMERS] = (sums[_CONSUMERS] or 0) - sum(len(found) for found in links.values())
            for i, field in _OUT_FIELDS:  # what went to the links is counted where it went on to
                sums[i] = (sums[i] or 0) - sum(getattr(c.traffic, field) for f in links.values() for c in f)
        if not persistent:
            return
        compaction = getattr(topic, "compaction", None)
        if compaction is not None and (compaction.view is not None or compaction.record.ran):
            compacted = self.compaction.get(row_key)
            if compacted is None:
                compacted = self.compaction[row_key] = [0.0] * len(_COMPACTION_METRICS)
            for i, (_, _, value) in enumerate(_COMPACTION_METRICS):
                compacted[i] += value(compaction)
        for name, sub in list(topic.subscriptions.items()):
            dispatcher = sub.dispatcher
            if isinstance(dispatcher, BroadcastDispatcher):
                labels = [cluster, namespace, key, name]
                out = dispatcher.subscription.traffic.messages_out
                stats = dispatcher.stats()
                if found := links.get(name):  # the other workers' links: not consumers
                    out -= sum(link.traffic.messages_out for link in found)
                    stats["virtualCursors"] -= len(found)
                    stats["detachedCursors"] -= sum(1 for kept in dispatcher.detached if link_worker(kept))
                self.broadcast.append((labels, stats, out, largest_lag(dispatcher)))
        if topic.replication_cursors:
            for remote, stats in replication_stats(topic).items():
                self.replication.append(([cluster, namespace, key, remote], stats))

    def add_followed(self, key: str, follower, cluster: str) -> None:
        """Read what this worker serves of the spread topic ``follower`` follows (spread.py): its
        consumers and broadcast subscriptions; the rest of the topic is its owner's to count."""
        namespace = str(follower.name.namespace_name)
        _, sums = self._row(key, follower, cluster)
        subscriptions = list(follower.subscriptions.items())
        sums[_CONSUMERS] = (sums[_CONSUMERS] or 0) + sum(len(sub.consumers) for _, sub in subscriptions)
        for i, field in _OUT_FIELDS:
            sums[i] = (sums[i] or 0) + getattr(follower.traffic, field)
        for name, sub in subscriptions:
            dispatcher = sub.dispatcher
            if isinstance(dispatcher, BroadcastDispatcher):
                labels = [cluster, namespace, key, name]
                out = sub.traffic.messages_out
                self.broadcast.append((labels, dispatcher.stats(), out, largest_lag(dispatcher)))

    def collect(self) -> Iterator[Metric]:
        """The families (off the loop: this makes one sample per value)."""
        labels = ["cluster", "namespace", "topic"] if self.per_topic else ["cluster", "namespace"]
        for i, (kind, metric, text, _, _) in enumerate(_TOPIC_METRICS):
            family = kind(metric, text, labels=labels)
            for key, sums in self.rows.items():
                if (total := sums[i]) is not None:
                    family.add_metric(list(key), total)
            yield family
        for i, (metric, text, _) in enumerate(_COMPACTION_METRICS):
            compaction = GaugeMetricFamily(metric, text, labels=labels)
            for key, values in self.compaction.items():
                compaction.add_metric(list(key), values[i])
            yield compaction
        yield from self.broadcast_families()
        yield from self.replication_families()

    def broadcast_families(self) -> Iterator[Metric]:
        labels = ["cluster", "namespace", "topic", "subscription"]
        families = [
            (kind(name, text, labels=labels), field) for kind, name, text, field in _BROADCAST_METRICS
        ]
        out = CounterMetricFamily(
            "magnetar_broadcast_messages_out", "Messages delivered, all consumers together", labels=labels
        )
        lag = GaugeMetricFamily(
            "magnetar_broadcast_consumer_lag_max",
            "Messages (entries, as msgBacklog counts them) after the lowest connected consumer's mark-delete",
            labels=labels,
        )
        for values, stats, messages_out, largest in self.broadcast:
            for family, key in families:
                family.add_metric(values, stats.get(key, 0))
            out.add_metric(values, messages_out)
            lag.add_metric(values, largest)
        for family, _ in families:
            yield family
        yield out
        yield lag

    def replication_families(self) -> Iterator[Metric]:
        """``pulsar_replication_*`` per persistent topic and remote cluster (label ``remote_cluster``)."""
        labels = ["cluster", "namespace", "topic", "remote_cluster"]
        families = [
            (kind(name, text, labels=labels), field) for kind, name, text, field in _REPLICATION_METRICS
        ]
        for values, stats in self.replication:
            for family, field in families:
                family.add_metric(values, float(stats[field]))
        for family, _ in families:
            yield family


async def read_topics(service: BrokerService) -> TopicValues:
    """Every loaded topic's values, ``topic_slices.READ_SLICE`` topics at a time: the loop serves
    everyone else between slices (100,000 topics read at once held it for seconds)."""
    values = TopicValues(service.config.expose_topic_level_metrics_in_prometheus, service.spread.topics)
    cluster = service.config.cluster_name
    for part in in_slices(service.topics, READ_SLICE):
        for key, topic in part:
            values.add(key, topic, cluster)
        await asyncio.sleep(0)
    for key, follower in list(service.spread.followers.items()):
        values.add_followed(key, follower, cluster)
    return values


class _Collected(Collector):
    """Metrics read already (on the loop), for a registry that makes the page off it."""

    def __init__(self, metrics: list[Metric], topics: TopicValues) -> None:
        self._metrics = metrics
        self._topics = topics

    def collect(self) -> Iterator[Metric]:
        yield from self._metrics
        yield from self._topics.collect()


async def collected(service: BrokerService) -> CollectorRegistry:
    """``GET /metrics``'s registry: what is read of the broker is read here, on the loop (the
    topics a slice at a time); its families are made when it is collected (``rendered``)."""
    broker = list(BrokerCollector(service).collect())
    return registry_of(broker, await read_topics(service))


def registry_of(broker: list[Metric], topics: TopicValues) -> CollectorRegistry:
    """A registry of what was read (``broker``'s families, ``topics``' values) and the process's
    own metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collected(broker, topics))
    registry.register(ProcessCollector(registry=None))
    return registry


async def rendered(registry: Callable[[], CollectorRegistry]) -> bytes:
    """The page of the registry ``registry()`` makes, in Prometheus' text format, made on a thread."""
    return await asyncio.get_running_loop().run_in_executor(None, lambda: generate_latest(registry()))


def response(body: bytes) -> web.Response:
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def workers_registry(local: CollectorRegistry, me: str, parts: list[Part]) -> CollectorRegistry:
    """One scrape of every worker: this one's ``local`` registry and the other workers' ``parts``
    (their own scrapes), each series labelled with its worker (metrics_workers.py)."""
    from magnetar.admin.metrics_workers import WorkersCollector, parse

    families = {me: list(local.collect())}
    up = {me: True}
    for part in parts:
        up[part.worker] = False
        if part.ok:
            try:
                families[part.worker] = parse(part.body.decode())
                up[part.worker] = True
            except ValueError as exc:
                log.warning("the metrics of %s cannot be read: %s", part.worker, exc)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkersCollector(dict(sorted(families.items())), dict(sorted(up.items()))))
    return registry
