"""The broadcast lag policy: close a consumer that has fallen too far behind, so it stops holding
the subscription's backlog.

Off by default (``broadcast_max_lag_messages`` and ``broadcast_max_lag_seconds`` both 0). A sweep
every ``broadcast_lag_check_interval_seconds`` finds, per broadcast subscription, one threshold
position and compares each virtual cursor's mark-delete position against it: O(consumers)
comparisons, no ledger look-up per consumer.

- By count: the entry ``max_lag_messages`` before the last stored one. A consumer whose
  mark-delete position is below it has more than that many entries left to acknowledge (counted
  as ``msgBacklog`` counts them: a batch is one entry).
- By age: the last entry older than ``max_lag_seconds`` by broker time (a binary search, and only
  when the subscription's oldest unacknowledged entry is that old). A consumer below it has not
  acknowledged a message older than the limit.

A consumer past either is sent CLOSE_CONSUMER (the client subscribes again, and starts where the
subscription is: what it missed is lost to it) and its virtual cursor is given up; a detached
virtual cursor (kept for the reconnect grace) is given up the same way.

The walk over the broker's topics to their broadcast subscriptions is housekeeping.py's (it sits
above the topics); here is one subscription's sweep.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.entry_search import (
    EntryReader,
    EntrySpace,
    entry_time,
    first_readable,
    read_or_none,
    reader_for,
)
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.entry import EntryData
    from magnetar.storage.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

K = TypeVar("K")


@dataclass(frozen=True)
class LagLimits:
    """The policy's limits; 0 turns one off."""

    max_messages: int = 0
    max_seconds: float = 0.0

    @property
    def enabled(self) -> bool:
        return self.max_messages > 0 or self.max_seconds > 0


@dataclass(frozen=True)
class Threshold:
    """A mark-delete position below ``position`` is past the limit named by ``reason``."""

    position: Position
    reason: str


# -- pure parts ----------------------------------------------------------------------------------


def count_cut(size: int, max_messages: int) -> int | None:
    """The ordinal (0..size-1) of the entry ``max_messages`` before the last of ``size`` entries;
    None when no consumer can be that far behind."""
    ordinal = size - 1 - max_messages
    return ordinal if ordinal >= 0 else None


def age_cut(first_young: int) -> int | None:
    """The ordinal of the last entry older than the limit, given the first one that is not."""
    return first_young - 1 if first_young > 0 else None


def strictest(*thresholds: Threshold | None) -> Threshold | None:
    """The highest of the thresholds: what is below a lower one is below it too."""
    present = [t for t in thresholds if t is not None]
    return max(present, key=lambda t: t.position) if present else None


def past(cursors: Iterable[tuple[K, Position]], threshold: Position) -> list[K]:
    """The keys whose mark-delete position is below ``threshold`` (one comparison each)."""
    return [key for key, mark_delete in cursors if mark_delete < threshold]


# -- on a managed ledger ---------------------------------------------------------------------------


def threshold_for(
    ml: ManagedLedger,
    limits: LagLimits,
    now_s: float,
    oldest_unacked: Position,
    read: EntryReader | None = None,
) -> Threshold | None:
    """This sweep's threshold for a subscription whose oldest unacknowledged entry is
    ``oldest_unacked`` (its cursor's mark-delete position's next): one ledger-list walk, plus
    O(log n) entry reads (``read``, the ledger's by default) for the age limit when that entry
    is older than it."""
    if oldest_unacked > ml.last_confirmed:
        return None  # nothing unacknowledged: nobody lags
    space = EntrySpace(ml)
    by_count = by_age = None
    if limits.max_messages > 0 and (cut := count_cut(space.size, limits.max_messages)) is not None:
        by_count = Threshold(space.position(cut), f"more than {limits.max_messages} messages behind")
    if limits.max_seconds > 0:
        by_age = _age_threshold(reader_for(ml, read), space, limits.max_seconds, now_s, oldest_unacked)
    return strictest(by_count, by_age)


def _age_threshold(
    read: EntryReader, space: EntrySpace, max_seconds: float, now_s: float, oldest_unacked: Position
) -> Threshold | None:
    """The last entry older than the limit. A damaged (or meanwhile trimmed) entry takes the
    answer of the next readable one (``first_readable``): taken for old, one amid young entries
    would move the cut past them and close consumers that are within the limit (issue 34)."""
    cutoff_ms = int((now_s - max_seconds) * 1000)

    def young(data: EntryData) -> bool:
        return entry_time(data) >= cutoff_ms

    start = space.ordinal(oldest_unacked)
    if start is None:
        start = 0  # below the oldest ledger left (trimmed): search them all
    if (data := read_or_none(read, space.position(start))) is not None and young(data):
        return None  # the subscription's oldest unacknowledged message is within the limit
    found = first_readable(space, read, young)
    if found <= start:
        return None  # damaged at the start, and the next readable one is young
    cut = age_cut(found)
    if cut is None:
        return None
    return Threshold(space.position(cut), f"a message older than {max_seconds:g} s unacknowledged")


# -- one subscription's sweep -------------------------------------------------------------------------


def sweep_subscription(dispatcher: BroadcastDispatcher, limits: LagLimits, now_s: float) -> int:
    """Close the consumers and give up the detached virtual cursors past the limits; how many."""
    subscription = dispatcher.subscription
    ml = dispatcher.ml
    if not dispatcher.consumers and not dispatcher.detached:
        return 0
    cursor = subscription.cursor
    threshold = threshold_for(ml, limits, now_s, ml.next_position(cursor.mark_delete_position))
    if threshold is None:
        return 0
    where = f"{subscription.topic.name}/{subscription.name}"
    cut = threshold.position
    laggards = past(((c, vc.mark_delete) for c, vc in dispatcher.consumers.items()), cut)
    for consumer in laggards:
        log.info(
            "%s: broadcast consumer %r at %s (%s) closed: %s",
            where,
            consumer.name,
            dispatcher.consumers[consumer].mark_delete,
            consumer.address,
            threshold.reason,
        )
        consumer.disconnect()
    gone = past(((name, vc.mark_delete) for name, (vc, _) in dispatcher.detached.items()), cut)
    for name in gone:
        log.info(
            "%s: detached virtual cursor of broadcast consumer %r given up: %s", where, name, threshold.reason
        )
        dispatcher.drop_detached(name)
    dispatcher.lag_disconnects += len(laggards) + len(gone)
    return len(laggards) + len(gone)
