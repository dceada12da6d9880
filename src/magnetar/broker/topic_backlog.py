"""A persistent topic's backlog: its size and age, the backlog quotas it is held to and what
their policies do when it is past one (hold or refuse producers, evict), and message expiry."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Never

from magnetar.broker import backlog_quota
from magnetar.broker.entry_search import EntrySpace, entry_time, first_true
from magnetar.broker.offloaded_reads import PatientReader, answer, answered
from magnetar.storage.errors import EntryNotFoundError, OffloadedReadError, OffloadedReadPending
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic_api import CursorSubscription, LedgerTopic

log = logging.getLogger(__name__)


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
    """Seconds since the oldest unacknowledged message was stored (broker time), if any.

    An oldest entry in an offloaded ledger is not waited for on the loop: while it is fetched (or
    its store fails) the age is estimated from its ledger's close time, which it cannot be younger
    than (as Pulsar's estimate with ``preciseTimeBasedBacklogQuotaCheck`` off)."""
    slowest = _slowest_position(topic)
    if slowest is None:
        return None
    ml = topic.ml
    oldest = ml.next_position(slowest)
    while ml.has_entry(oldest):
        try:
            return (now_ms - entry_time(ml.read_entry(oldest, wait=False).data)) / 1000
        except EntryNotFoundError:  # damaged: reads pass over it, and so does its age
            oldest = ml.next_position(oldest)
        except (OffloadedReadPending, OffloadedReadError):
            closed_at = next((i.closed_at for i in ml.ledgers() if i.ledger_id == oldest.ledger_id), None)
            return None if closed_at is None else max(0.0, now_ms / 1000 - closed_at)
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
    topic: LedgerTopic,
    seconds: float,
    subscriptions: Sequence[CursorSubscription[Never]] | None = None,
    expired: Callable[[list[str]], None] | None = None,
) -> None:
    """Acknowledge, for ``subscriptions`` (default: all of ``topic``'s), the messages older than
    ``seconds`` by broker time (message TTL, age quota eviction); ``expired`` is told the names of
    those that had any. The search never waits for the object store on the loop: with offloaded
    entries to fetch, the expiry is applied once they are there (offloaded_reads.py); a store
    that fails leaves it to the next time."""
    stamp, reader = _expiry_stamp(seconds), PatientReader(topic.ml)

    def apply(start: Position | None, error: BaseException | None) -> None:
        if start is None:
            log.warning("%s: messages older than %gs not expired now: %s", topic.name, seconds, error)
            return
        names = expire_before(topic, start, subscriptions)
        if expired is not None:
            expired(names)

    what = f"expiring messages of {topic.name}"
    answer(topic.ml, lambda: topic.find_position_by_time(stamp, reader), what, apply)


async def expired_older_than(
    topic: LedgerTopic, seconds: float, subscriptions: Sequence[CursorSubscription[Never]] | None = None
) -> list[str]:
    """``expire_older_than`` for an answer that waits (the admin API's expire-messages): the names
    of the subscriptions that had messages to expire; ``OffloadedReadError`` if the store fails."""
    stamp, reader = _expiry_stamp(seconds), PatientReader(topic.ml)
    what = f"expiring messages of {topic.name}"
    start = await answered(topic.ml, lambda: topic.find_position_by_time(stamp, reader), what)
    return expire_before(topic, start, subscriptions)


def _expiry_stamp(seconds: float) -> int:
    return int(time.time() * 1000 - seconds * 1000)


def expire_before(
    topic: LedgerTopic, start: Position, subscriptions: Sequence[CursorSubscription[Never]] | None = None
) -> list[str]:
    """Acknowledge everything before ``start`` for ``subscriptions`` (default: all); those that had any."""
    targets = list(topic.subscriptions.values()) if subscriptions is None else subscriptions
    return [subscription.name for subscription in targets if subscription.expire_before(start)]
