"""A persistent topic's backlog: its size and age, the backlog quotas it is held to and what
their policies do when it is past one (hold or refuse producers, evict), and message expiry."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Never

from magnetar.broker import backlog_quota
from magnetar.broker.entry_search import EntrySpace, entry_time, first_true
from magnetar.storage.errors import EntryNotFoundError
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic_api import CursorSubscription, LedgerTopic


def quotas(topic: LedgerTopic) -> dict[str, backlog_quota.BacklogQuota]:
    """The quotas in force: the namespace's, else the broker's defaults."""
    policies = topic.policies() if topic.policies is not None else None
    namespace_map = policies.backlog_quota_map if policies is not None else None
    return backlog_quota.effective_quotas(namespace_map, topic.config.default_backlog_quotas())


def _slowest_position(topic: LedgerTopic) -> Position | None:
    """The mark-delete position of the subscription or geo-replication cursor furthest behind
    (None: neither). A remote that is away grows the backlog as a slow subscription does, so a
    quota's hold or refuse policy applies to it; eviction acknowledges for subscriptions only:
    what is not yet replicated is never dropped."""
    cursors = [sub.cursor for sub in topic.subscriptions.values()]
    cursors += topic.replication_cursors.values()
    return min((cursor.mark_delete_position for cursor in cursors), default=None)


def size(topic: LedgerTopic) -> int:
    """Estimated bytes from the slowest subscription on (what a size quota limits)."""
    slowest = _slowest_position(topic)
    return 0 if slowest is None else topic.ml.size_after(slowest)


def oldest_age(topic: LedgerTopic, now_ms: int) -> float | None:
    """Seconds since the oldest unacknowledged message was stored (broker time), if any."""
    slowest = _slowest_position(topic)
    if slowest is None:
        return None
    oldest = topic.ml.next_position(slowest)
    while topic.ml.has_entry(oldest):
        try:
            return (now_ms - entry_time(topic.ml.read_entry(oldest).data)) / 1000
        except EntryNotFoundError:  # damaged: reads pass over it, and so does its age
            oldest = topic.ml.next_position(oldest)
    return None


def exceeded(topic: LedgerTopic) -> tuple[str, backlog_quota.BacklogQuota] | None:
    """The backlog quota ``topic`` is past, with its kind; None if within all (or none set)."""
    in_force = quotas(topic)
    size_quota, age_quota = in_force[backlog_quota.SIZE], in_force[backlog_quota.AGE]
    if size_quota.limit_size < 0 and age_quota.limit_time < 0:
        return None
    oldest = oldest_age(topic, int(time.time() * 1000)) if age_quota.limit_time >= 0 else None
    return backlog_quota.exceeded(in_force, size(topic), oldest)


def enforce(topic: LedgerTopic) -> str | None:
    """Apply the policy of the quota ``topic`` is past (see backlog_quota.py); its kind, or None."""
    blocked = exceeded(topic)
    if blocked is None:
        return None
    kind, quota = blocked
    if quota.policy != backlog_quota.EVICTION:
        for producer in list(topic.producers.values()):
            producer.close_by_broker()
    elif kind == backlog_quota.SIZE:
        _evict_to_size(topic, quota.limit_size)
    else:
        expire_older_than(topic, quota.limit_time)
    return kind


def _evict_to_size(topic: LedgerTopic, limit_bytes: int) -> None:
    """Acknowledge, for the subscriptions furthest behind, the oldest entries until at most
    ``limit_bytes`` are left after them."""
    ml = topic.ml
    space = EntrySpace(ml)
    keep_from = first_true(space.size, lambda i: ml.size_after(space.position(i)) <= limit_bytes)
    if keep_from == space.size:
        return
    start = ml.next_position(space.position(keep_from))
    for subscription in topic.subscriptions.values():
        subscription.expire_before(start)


def expire_older_than(
    topic: LedgerTopic, seconds: float, subscriptions: Sequence[CursorSubscription[Never]] | None = None
) -> list[str]:
    """Acknowledge, for ``subscriptions`` (default: all of ``topic``'s), the messages older than
    ``seconds`` by broker time (message TTL, expire-messages, age quota eviction); the names of
    those that had any."""
    start = topic.find_position_by_time(int(time.time() * 1000 - seconds * 1000))
    targets = list(topic.subscriptions.values()) if subscriptions is None else subscriptions
    return [subscription.name for subscription in targets if subscription.expire_before(start)]
