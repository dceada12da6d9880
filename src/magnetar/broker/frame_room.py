"""Room for large frames being received, all connections together (``FrameBudget``): letting
the connections in line in as room frees, the warning when it fills, and closing the connections
whose large frame has held its room too long while others wait."""

from __future__ import annotations

import logging
import time

from magnetar.broker.flow_control import Hold
from magnetar.broker.frame_budget import FrameBudget, FrameReceiver

log = logging.getLogger(__name__)


def release(budget: FrameBudget, cnx: FrameReceiver) -> None:
    """``cnx`` gives back its room for a large frame (or leaves the line): let the next ones in."""
    for waiter in budget.release(cnx, time.monotonic()):
        waiter.frame_room_granted()


def warn_full(budget: FrameBudget, cnx: FrameReceiver, size: int, timeout_s: float) -> None:
    """Log, once per time the budget fills up (not per waiting connection), who waits for what."""
    if len(budget.waiters) == 1:
        log.warning(
            "large frames being received hold %d bytes (max_incomplete_frame_bytes %d): "
            "%s waits to receive a frame of %d bytes; frames stalled for %.0f s will be dropped",
            budget.bytes,
            budget.limit,
            cnx.remote,
            size,
            timeout_s,
        )


def close_stalled(budget: FrameBudget, timeout_s: float) -> None:
    """Close the connections whose large frame has held its room over ``timeout_s`` while others wait.

    A connection we do not read for our own reasons (its sends await receipts, the publish
    buffer is full) is not to blame for its frame's delay, and is left alone.
    """
    now = time.monotonic()
    ours = Hold.SENDS | Hold.BROKER
    for cnx in budget.overdue(now, timeout_s):
        if not budget.waiters:
            break  # the room freed so far was enough
        if not cnx.holds.held & ours:
            size, since = budget.holders[cnx]
            cnx.close_for_stalled_frame(size, now - since)
            release(budget, cnx)
