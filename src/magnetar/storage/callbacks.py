"""How add completions reach the owner of a managed ledger."""

from __future__ import annotations

import logging
from collections.abc import Callable

from magnetar.storage.position import Position

log = logging.getLogger(__name__)

Notify = Callable[[Callable[[], None]], None]
DurableCallback = Callable[[Position | None, Exception | None], None]


def dispatch(
    notify: Notify | None,
    calls: list[tuple[DurableCallback, Position]],
    failure: Exception | None,
    owner: str,
) -> None:
    """Run ``on_durable`` callbacks in order, in one hop through ``notify``.

    One hop per group-commit round rather than per entry: with
    ``loop.call_soon_threadsafe`` every hop is a wake-up write to the loop's
    self-pipe. A raising callback is logged and does not stop the others.
    """
    if not calls:
        return

    def fire() -> None:
        for callback, position in calls:
            try:
                if failure is None:
                    callback(position, None)
                else:
                    callback(None, failure)
            except Exception:
                log.exception("%s: on_durable callback for %s raised", owner, position)

    if notify is None:
        fire()
        return
    try:
        notify(fire)
    except Exception:  # e.g. the owner's event loop is already closed
        log.exception("%s: could not hand %d callbacks to notify", owner, len(calls))
