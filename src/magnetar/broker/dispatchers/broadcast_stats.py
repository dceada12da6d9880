"""Figures of a broadcast subscription's consumers, computed from positions when asked.

Nothing here runs on the send or ack path: a consumer's backlog is counted from its mark-delete
position with the managed ledger's ledger list (no entry read), and the largest lag is one pass
over the virtual cursors (a comparison each) and one such count, at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.storage.managed_ledger import ManagedLedger

T = TypeVar("T")

#: Consumers a broadcast subscription lists in topic stats; the rest are paged.
STATS_CONSUMERS = 100
#: Most consumers one page of ``.../subscription/{sub}/consumers`` lists, and its default.
PAGE_LIMIT = 1000
PAGE_DEFAULT = 100


def is_broadcast(subscription: object) -> bool:
    """A broadcast subscription, persistent (its dispatcher) or not (its flag)."""
    return bool(getattr(subscription, "broadcast", False)) or isinstance(
        getattr(subscription, "dispatcher", None), BroadcastDispatcher
    )


def page_bounds(offset: int, limit: int, cap: int = PAGE_LIMIT) -> tuple[int, int]:
    """(start, stop) of a page; ValueError (400) for a negative offset or a limit below 1.
    A limit over ``cap`` is cut to it."""
    if offset < 0:
        raise ValueError(f"offset must be 0 or more, not {offset}")
    if limit < 1:
        raise ValueError(f"limit must be 1 or more, not {limit}")
    return offset, offset + min(limit, cap)


def page(items: Iterable[T], start: int, stop: int) -> list[T]:
    return list(islice(items, start, stop))


def entries_behind(ml: ManagedLedger, mark_delete: Position) -> int:
    """Entries stored after ``mark_delete`` (ledger list only, no read)."""
    last = ml.last_confirmed
    start = ml.next_position(mark_delete)
    return ml.number_of_entries(start, last) if start <= last else 0


def backlog(ml: ManagedLedger, vc: VirtualCursor) -> int:
    """What a consumer has still to acknowledge, as ``msgBacklog`` counts it: entries after its
    mark-delete position less those it acknowledged past it."""
    return max(0, entries_behind(ml, vc.mark_delete) - vc.acked_count)


def largest_lag(dispatcher: BroadcastDispatcher) -> int:
    """Entries after the lowest mark-delete position of the connected consumers (0 with none)."""
    cursors = dispatcher.consumers
    if not cursors:
        return 0
    lowest = min(vc.mark_delete for vc in cursors.values())
    return entries_behind(dispatcher.ml, lowest)
