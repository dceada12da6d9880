"""The broker's background work, run every so often on the loop: rates over the stats interval,
backlog quotas, cursor and state flushes, message TTL, retention trims, the broadcast lag policy,
compaction by threshold.

A pass over every loaded topic goes ``topic_slices.SLICE`` topics at a time, and the loop serves everyone else
between slices: with 100,000 topics loaded one pass in one go would stall every client for
seconds."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor
from functools import partial

from magnetar.broker import descriptors, topic_slices
from magnetar.broker.coarse_clock import CLOCK
from magnetar.broker.dispatchers import broadcast_lag
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.nonpersistent import NonPersistentTopic
from magnetar.broker.offloads import Offloads
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.errors import StorageFullError

log = logging.getLogger(__name__)

Topics = Mapping[str, PersistentTopic | NonPersistentTopic]
#: A background action: done when it returns, or a pass of steps (the loop runs between them).
Action = Callable[[], "Iterator[None] | None"]


def in_slices(topics: Topics) -> Iterator[list[PersistentTopic | NonPersistentTopic]]:
    """The topics loaded when the pass began, ``SLICE`` at a time (topic_slices.py)."""
    for part in topic_slices.in_slices(topics):
        yield [topic for _, topic in part]


async def every(seconds: float, action: Action) -> None:
    """Run ``action`` every ``seconds`` until cancelled. A failure is logged, not fatal, and said
    once while it lasts (a full disk would otherwise log a traceback every second): again only
    when it fails another way, and a line when the task works again."""
    what = getattr(action, "func", action)  # a functools.partial: the function it calls
    name = getattr(what, "__name__", what)
    failing: type[Exception] | None = None
    while True:
        await asyncio.sleep(seconds)
        try:
            steps = action()
            if steps is not None:
                for _ in steps:
                    await asyncio.sleep(0)  # the loop serves everyone else between slices
        except StorageFullError as exc:  # no room: the write gate's state, not a bug
            if failing is not StorageFullError:
                log.error("background task %s failed: %s; said once until it works again", name, exc)
            failing = StorageFullError
        except Exception as exc:
            if descriptors.is_exhaustion(exc):
                # Out of descriptors (a flush reopening a cursor's files): said and counted where
                # the refusals are, and tried again next time; not a bug.
                descriptors.EXHAUSTION.refused("write", f"background task {name}: {exc}")
                continue
            if failing is not type(exc):
                log.exception("background task %s failed; said once until it works again", name)
            failing = type(exc)
        else:
            if failing is not None:
                log.warning("background task %s works again", name)
                failing = None


def update_rates(topics: Topics) -> Iterator[None]:
    """Every topic's, producer's and consumer's rates over the stats interval just ended."""
    now = time.monotonic()
    for part in in_slices(topics):
        for topic in part:
            topic.traffic.update_rates(now)
            for producer in topic.producers.values():
                producer.traffic.update_rates(now)
            for replicator in topic.replicators.values():
                replicator.traffic.update_rates(now)
            if isinstance(topic, PersistentTopic):
                topic.compaction.record.update_rates(now)
            for subscription in topic.subscriptions.values():
                subscription.traffic.update_rates(now)
                for consumer in subscription.consumers:
                    consumer.traffic.update_rates(now)
        yield


def check_backlog_quotas(topics: Topics) -> Iterator[None]:
    """Apply each persistent topic's backlog quota policy where its backlog is past a limit."""
    for part in in_slices(topics):
        for topic in part:
            if topic.ml is None:
                continue
            kind = topic.enforce_backlog_quota()
            if kind is not None:
                log.info("%s: backlog quota exceeded (%s)", topic.name, kind)
        yield


def flush_all(topics: Topics) -> Iterator[None]:
    for part in in_slices(topics):
        for topic in part:
            topic.flush()
        yield


def expire_messages(topics: Topics, namespaces: NamespaceRegistry) -> Iterator[None]:
    """Message TTL: in namespaces with a TTL, acknowledge for every subscription what is older
    (by broker time, found with a binary search)."""
    for part in in_slices(topics):
        for topic in part:
            if topic.ml is None:
                continue
            ttl = namespaces.policies(topic.name.namespace_name).message_ttl_seconds
            if not ttl:
                continue
            topic.expire_older_than(ttl, expired=partial(_said_expired, topic.name, ttl))
        yield


def _said_expired(topic: TopicName, ttl: int, names: list[str]) -> None:
    for name in names:
        log.info("%s/%s: expired messages older than %ds", topic, name, ttl)


def trim_all(topics: Topics, namespaces: NamespaceRegistry) -> Iterator[None]:
    """Retention: delete each persistent topic's consumed ledgers past its namespace's limits."""
    for part in in_slices(topics):
        for topic in part:
            if topic.ml is None:
                continue
            policies = namespaces.policies(topic.name.namespace_name)
            time_s = size_b = None
            if policies.retention_time_minutes is not None:
                time_s = policies.retention_time_minutes * 60.0
            if policies.retention_size_mb is not None:
                size_b = policies.retention_size_mb * 1024 * 1024
            deleted = topic.trim(time_s, size_b)  # flushes the topic state first
            if deleted:
                log.info("%s: deleted consumed ledgers %s", topic.name, deleted)
        yield


def offload_all(topics: Topics, offloads: Offloads) -> Iterator[None]:
    """Tiered storage: each persistent topic's offload threshold and deletion lag (the uploads run
    on the offload threads), then the objects nobody owns."""
    for part in in_slices(topics):
        for topic in part:
            if topic.ml is not None and not topic.ml.closed:
                offloads.check(topic)
        yield
    offloads.sweep()


def check_compaction(
    topics: Topics, threshold_of: Callable[[TopicName], int], executor: Executor | None
) -> Iterator[None]:
    """Pulsar's compaction monitor: start a compaction of each persistent topic whose backlog not
    yet compacted is past the compaction threshold that applies to it (``threshold_of``: 0 is
    off); one under its threshold gets its ``__compaction`` cursor, so nothing is trimmed before
    compaction reads it."""
    for part in in_slices(topics):
        for topic in part:
            if not isinstance(topic, PersistentTopic):
                continue
            threshold = threshold_of(topic.name)
            compaction = topic.compaction
            if threshold <= 0 or compaction.running:
                continue
            durable = [sub.cursor for sub in topic.subscriptions.values() if sub.durable]
            backlog = compaction.backlog_estimate(durable)
            if backlog > threshold:
                log.info("%s: %d bytes not compacted, over %d: compacting", topic.name, backlog, threshold)
                compaction.start(executor)
            else:
                compaction.make_cursor(executor)
        yield


def broadcast_dispatchers(topics: Topics) -> Iterator[tuple[PersistentTopic, str, BroadcastDispatcher]]:
    """Every persistent topic's broadcast subscriptions: (topic, subscription name, dispatcher)."""
    for topic in list(topics.values()):
        if topic.ml is None:
            continue
        for name, sub in list(topic.subscriptions.items()):
            if isinstance(sub.dispatcher, BroadcastDispatcher):
                yield topic, name, sub.dispatcher


def sweep_broadcast_lag(topics: Topics, limits: broadcast_lag.LagLimits, now_s: float) -> int:
    """One sweep of the broadcast lag policy over every broadcast subscription
    (``broadcast_lag.sweep_subscription``); the consumers and virtual cursors dropped."""
    if not limits.enabled:
        return 0
    dispatchers = broadcast_dispatchers(topics)
    return sum(broadcast_lag.sweep_subscription(d, limits, now_s) for _, _, d in dispatchers)


def sweep_broadcast(topics: Topics, limits: broadcast_lag.LagLimits) -> None:
    """Tick the coarse clock (broadcast last-ack times), then apply the broadcast lag policy."""
    now = CLOCK.tick()
    sweep_broadcast_lag(topics, limits, now)
