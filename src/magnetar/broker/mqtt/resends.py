"""Sends to another worker's topic that its owner dropped unstored, sent again before anything else
the connection publishes there.

A PUBLISH to a topic another worker owns goes as a SEND through the connection's producer there
(``remote.py``). When the owner closes that producer before its receipt (the topic's bundle moved,
the owner restarted), the send goes again, with its sequence id, through a producer at the topic's
owner then, or is stored here where the bundle came to this worker; deduplication answers a copy
the old owner stored after all. A sequence id is also a message's place: the topic answers a send
whose sequence id is not above the highest it took from the producer as a duplicate, and does not
store it. So every dropped send must reach the topic before any later PUBLISH of the connection
does. Sent again each on its own a moment later, they were overtaken by the PUBLISHes behind them
(which made a producer at the new owner at once), answered as duplicates, unstored, and PUBACKed:
lost. Here a topic's dropped sends are held together, in the order they were sent; the connection
routes no PUBLISH to the topic while they are held (``released``), and they go again together, in
order, through one producer at the owner (or into the topic here, each in an entry of its own:
``inbound._store_here``), before the gate opens. The bundle may come to this worker before its
old owner closes the producer there: a PUBLISH to be stored here waits (``unreceipted``) until
the sends at the old owner are answered or dropped (and held).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.mqtt import remote
from magnetar.protocol import wire

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection
    from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

#: How often the held sends look for the topic's owner (the bundle between owners), and how long
#: before each look (times its number).
TRIES = 6
DELAY_S = 0.2


@dataclass(slots=True)
class Dropped:
    """A send its producer at the owner dropped, and the ways it can go again."""

    #: Through a producer at the topic's owner, with its sequence id.
    to_owner: Callable[[remote.RemoteProducer], None]
    #: Into the topic here (the bundle came to this worker), once it is open (the future of its
    #: opening off the loop, or None).
    here: Callable[[asyncio.Future[Any] | None], None]
    #: It cannot go again: told why.
    fail: Callable[[Exception], None]


class Held:
    """One topic's dropped sends, in the order they were sent; ``released`` once they went again
    (or failed), the gate of the connection's later PUBLISHes to the topic."""

    __slots__ = ("released", "sending", "sends")

    def __init__(self) -> None:
        self.sends: list[Dropped] = []
        self.released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        #: The task sending them again (kept: the loop holds its tasks weakly).
        self.sending: asyncio.Task[None] | None = None


def hold(cnx: MqttConnection, name: TopicName, dropped: Dropped) -> None:
    """Hold ``dropped`` behind the sends to ``name`` dropped before it; the first one held starts
    the sending again."""
    held_sends = cnx.links.held
    key = str(name)
    held = held_sends.get(key)
    if held is None:
        held = held_sends[key] = Held()
        held.sending = asyncio.ensure_future(_send_again(cnx, name, held))
    held.sends.append(dropped)


def released(cnx: MqttConnection, name: TopicName) -> asyncio.Future[None] | None:
    """While sends to ``name`` are held: done once they went again; None when none is held."""
    if not cnx.service.shares_bundles:  # a send goes to another worker only with workers
        return None
    held = cnx.links.held.get(str(name))
    return None if held is None else held.released


def unreceipted(cnx: MqttConnection, name: TopicName) -> asyncio.Future[None] | None:
    """While sends to ``name`` at its owner wait for their receipts: done once none does. A
    PUBLISH that would be stored here (the bundle came to this worker) waits for it: those sends
    may yet be dropped, held, and stored here, and must be before it."""
    if not cnx.service.shares_bundles:
        return None
    made = cnx.links.producers.get(str(name))
    if made is None or not made.done() or made.cancelled() or made.exception() is not None:
        return None
    return made.result().drained()


async def _send_again(cnx: MqttConnection, name: TopicName, held: Held) -> None:
    try:
        await _route(cnx, name, held)
    except Exception as exc:
        log.exception("%s: sending again to %s failed", cnx.remote, name)
        _fail(cnx, name, held, exc)
    finally:  # nothing stays held: the connection's PUBLISHes to the topic wait for this
        _fail(cnx, name, held, BrokerError("it could not be sent again", wire.ServiceNotReady))
        if not held.released.done():
            held.released.set_result(None)


async def _route(cnx: MqttConnection, name: TopicName, held: Held) -> None:
    """To wherever ``name`` is served a moment later: a producer at its owner, or this worker."""
    reason = "no try left"
    for attempt in range(1, TRIES + 1):
        await asyncio.sleep(DELAY_S * attempt)  # the bundle may be between owners
        if cnx.closed:
            _fail(cnx, name, held, BrokerError("the connection closed", wire.ServiceNotReady))
            return
        owner = remote.owner_elsewhere(cnx.service, name)
        if owner is None:  # this worker serves the topic now: stored here, with the same sequence ids
            opening = cnx.service.preparing(name)
            if opening is not None:
                await asyncio.wait((opening,))  # failed or not: each send is told
                if not_served(opening):  # the bundle left again while the topic was opened
                    reason = str(opening.exception())
                    continue
            for dropped in _take(cnx, name, held):
                dropped.here(opening)
            cnx.flush_publishes()
            return
        try:
            producer = await cnx.links.producer(name, owner)
        except Exception as exc:
            reason = str(exc)
            continue
        if producer.closed:
            reason = "its producer closed"
            continue
        for dropped in _take(cnx, name, held):
            dropped.to_owner(producer)
        return
    unreachable = BrokerError(f"the topic's owner cannot be reached: {reason}", wire.ServiceNotReady)
    _fail(cnx, name, held, unreachable)


def not_served(opened: asyncio.Future[Any] | None) -> bool:
    """A topic's opening here was refused: this worker does not serve its bundle (any more)."""
    if opened is None or not opened.done() or opened.cancelled():
        return False
    return getattr(opened.exception(), "code", None) == wire.ServiceNotReady


def _take(cnx: MqttConnection, name: TopicName, held: Held) -> list[Dropped]:
    """The held sends, no longer held: one dropped again from now on starts a hold of its own."""
    if cnx.links.held.get(str(name)) is held:
        del cnx.links.held[str(name)]
    sends, held.sends = held.sends, []
    return sends


def _fail(cnx: MqttConnection, name: TopicName, held: Held, exc: Exception) -> None:
    for dropped in _take(cnx, name, held):
        dropped.fail(exc)
