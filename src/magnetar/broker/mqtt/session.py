"""An MQTT session (4.1 in both standards): what the broker keeps of a client id across its
connections, until the session ends (Clean Start, or its Session Expiry Interval after the
connection closes).

A session is *durable* when it outlives its connection (Session Expiry Interval above 0 at its
start; 3.1.1: Clean Session 0). A durable session's subscriptions are durable Pulsar
subscriptions named after the client id (as Pulsar's MQTT handler names them), so what is
published while the client is away waits in them; its record (``session_store.py``) keeps its
filters, expiry and the topics it holds subscriptions on across a broker restart. A session that
ends with its connection takes its messages from the topic's shared broadcast subscription.

A will held back by its Will Delay Interval is in the record too (``will.py``). Kept in memory:
the QoS 2 messages received and not yet released (durable too: ``qos2_store.py``), the sequence
ids given to the client's messages per topic, and the packet identifiers of what it was sent and
has not acknowledged, so a resumed session gets them again under the same identifiers (4.4);
those are written into the record when its connection closes and when the broker stops, and
those of QoS 2 messages also before each such PUBLISH goes (``outbound.py``): after a kill -9 a
QoS 2 message the client may hold, its PUBREC not come, goes again under its identifier, with
DUP, so that the client knows it (a QoS 1 message comes again under a new one: the client takes
it as new, which at least once allows, as it would take it again under the same one, 4.3.2).

A QoS 2 message the client answered with PUBREC is its own: it must never come again as a new
message (4.3.3), even after a kill -9. Its entry's acknowledgement on the Pulsar subscription is
made then, but a cursor reaches the disk only at its next flush, so the message's key stays in the
record (``delivered``, written before the PUBREL) until the cursor holds that acknowledgement on
disk; a message the subscription hands out again whose key is there is acknowledged, not sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from magnetar.broker.mqtt.qos2_store import Received
from magnetar.protocol.mqtt import Will
from magnetar.storage.position import Position

#: A 3.1.1 session that is not clean never expires (5.0's 0xFFFFFFFF).
NEVER = 0xFFFFFFFF

#: One message a subscriber was sent: (Pulsar topic, ledger id, entry id, index in the entry).
MessageKey = tuple[str, int, int, int]


class AckedOnDisk(Protocol):
    """What ``MqttSession.prune_delivered`` asks of a subscription's cursor (a ManagedCursor)."""

    @property
    def dirty(self) -> bool: ...

    @property
    def persists(self) -> int: ...

    def is_acked(self, position: Position) -> bool: ...


@dataclass(slots=True)
class Watch:
    """Where a delivered message's acknowledgement is awaited: its subscription's cursor, and the
    cursor's count of flushes when the acknowledgement was first seen there (None: not yet)."""

    cursor: AckedOnDisk
    seen_at: int | None = None


@dataclass(slots=True)
class FilterOptions:
    """One Topic Filter a client subscribed to, with its Subscription Options (3.8.3.1)."""

    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    #: 5.0's Subscription Identifier given with it, if any.
    subscription_id: int | None = None


@dataclass(slots=True)
class Incoming:
    """A QoS 2 PUBLISH received: its record and whether it is stored yet (PUBREC is sent then)."""

    received: Received
    stored: bool = False


@dataclass(slots=True)
class MqttSession:
    client_id: str
    #: Seconds the session outlives its connection (0: it ends with it; NEVER: it does not expire).
    expiry: int = 0
    #: Its subscriptions are durable and its record is stored (expiry above 0 when it started).
    durable: bool = False
    #: Topic Filter -> its options, in subscribe order (shared ones as ``$share/{group}/{filter}``).
    filters: dict[str, FilterOptions] = field(default_factory=dict)
    #: ``topics`` and ``groups`` (below), made when first used: a session that ends with its
    #: connection never does, and an empty set is 216 bytes a connection.
    _topics: set[str] | None = None
    _groups: set[tuple[str, str]] | None = None
    #: QoS 2 messages received and not released, by packet identifier.
    incoming: dict[int, Incoming] = field(default_factory=dict)
    #: The next sequence id of the client's messages per topic (deduplication's numbering).
    sequences: dict[str, int] = field(default_factory=dict)
    #: QoS 1 and 2 messages sent and not yet acknowledged (PUBACK, PUBREC), and their packet
    #: identifiers: sent again under the same ones, with DUP, when the session resumes.
    unacked: dict[MessageKey, int] = field(default_factory=dict)
    unacked_ids: dict[int, MessageKey] = field(default_factory=dict)
    #: The keys of ``unacked`` sent at QoS 2, whose identifiers the record holds while connected
    #: (made when first used).
    _exact: set[MessageKey] | None = None
    #: ``released`` (below), made when first used.
    _released: set[int] | None = None
    #: QoS 2 messages the client PUBREC'd whose acknowledgement may not be on disk yet, with
    #: where it is awaited (None: not known yet, as after a restart): made when first used.
    _delivered: dict[MessageKey, Watch | None] | None = None
    #: Ends the session once its connection has been closed for ``expiry`` seconds.
    expiry_timer: asyncio.TimerHandle | None = None
    #: The connection now serving it (None between connections).
    connection: object | None = None
    #: When its last connection closed (wall-clock seconds); None while connected.
    disconnected_at: float | None = None
    #: It ended (expired, or a clean start replaced it): nothing more is written for it.
    ended: bool = False
    #: Its QoS 2 records are read (a session restored after a restart reads them when resumed).
    records_loaded: bool = True
    #: A will held back by its Will Delay Interval, with the connection that left it (``will.py``);
    #: when it is due (wall-clock seconds) and the role it is published as (authorization):
    #: kept in the session's record, so a restart publishes it too.
    pending_will: tuple[Will, object] | None = None
    will_timer: asyncio.TimerHandle | None = None
    will_due: float | None = None
    will_role: str | None = None
    #: The role its last connection authenticated as (None while authentication is off): a
    #: durable subscription its home makes for it while it is away, on a topic another worker
    #: owns, is made only where this role may consume (``remote.make_subscriptions``).
    role: str | None = None

    @property
    def topics(self) -> set[str]:
        """Topics (full Pulsar names) on which it holds a durable subscription named after its client id."""
        if self._topics is None:
            self._topics = set()
        return self._topics

    @topics.setter
    def topics(self, value: set[str]) -> None:
        self._topics = value

    @property
    def groups(self) -> set[tuple[str, str]]:
        """(topic, share name) of the durable shared subscriptions it is a member of."""
        if self._groups is None:
            self._groups = set()
        return self._groups

    @groups.setter
    def groups(self, value: set[tuple[str, str]]) -> None:
        self._groups = value

    def holds_group(self, topic: str, group: str) -> bool:
        """It is a member of the durable shared subscription ``group`` of ``topic`` (its groups
        are not made to answer)."""
        return self._groups is not None and (topic, group) in self._groups

    @property
    def released(self) -> set[int]:
        """QoS 2 messages sent whose PUBREL went and whose PUBCOMP has not come: PUBREL is sent
        again when the session resumes."""
        if self._released is None:
            self._released = set()
        return self._released

    def released_ids(self) -> list[int]:
        """``released``, in order, without making it."""
        return sorted(self._released) if self._released else []

    @property
    def producer_name(self) -> str:
        """The producer name its messages are stored under (Pulsar's MQTT handler names a
        client's producer after its client id too)."""
        return f"mqtt-{self.client_id}"

    def next_sequence(self, topic: str, highest_taken: int) -> int:
        """A sequence id above any the topic has from this client (``highest_taken``: what its
        deduplication holds, -1 for none)."""
        sequence = max(self.sequences.get(topic, 0), highest_taken + 1)
        self.sequences[topic] = sequence + 1
        return sequence

    def sent(self, key: MessageKey, packet_id: int, qos: int = 1) -> bool:
        """A QoS 1 or 2 message goes out under ``packet_id``. True when the session's record must
        hold it before it goes: a durable session's QoS 2 message under an identifier the record
        does not hold for it yet (see the module's docstring)."""
        unacked = self.unacked
        old = unacked.get(key)
        if old is not None and old != packet_id:
            self.unacked_ids.pop(old, None)
        unacked[key] = packet_id
        self.unacked_ids[packet_id] = key
        exact = self._exact
        if qos != 2:
            if exact:
                exact.discard(key)
            return False
        if exact is None:
            exact = self._exact = set()
        elif old == packet_id and key in exact:
            return False  # sent again as it was: the record has it
        exact.add(key)
        return self.durable

    def in_flight(self, every: bool) -> list[tuple[MessageKey, int, int]]:
        """(key, packet identifier, QoS) of what was sent and not acknowledged: ``every`` one, or
        those sent at QoS 2."""
        exact = self._exact or ()
        return [
            (key, packet_id, 2 if key in exact else 1)
            for key, packet_id in self.unacked.items()
            if every or key in exact
        ]

    def acknowledged(self, packet_id: int) -> None:
        """PUBACK or PUBREC of ``packet_id``: the message is the client's now."""
        key = self.unacked_ids.pop(packet_id, None)
        if key is not None and self.unacked.get(key) == packet_id:
            del self.unacked[key]
            if self._exact:
                self._exact.discard(key)

    def forget_topic(self, topic: str) -> None:
        """Its subscription on ``topic`` is gone: what it was sent from there is not waited for."""
        for key in [k for k in self.unacked if k[0] == topic]:
            self.unacked_ids.pop(self.unacked.pop(key), None)
            if self._exact:
                self._exact.discard(key)
        if self._delivered:
            for key in [k for k in self._delivered if k[0] == topic]:
                del self._delivered[key]

    # -- QoS 2 messages delivered: never sent again as new (see the module's docstring) -----------
    def delivered(self, key: MessageKey, cursor: AckedOnDisk | None = None) -> None:
        """PUBREC of the message ``key``: the client has it; its acknowledgement is awaited on
        ``cursor`` (None: not known yet)."""
        if self._delivered is None:
            self._delivered = {}
        self._delivered[key] = None if cursor is None else Watch(cursor)

    def any_delivered(self) -> bool:
        return bool(self._delivered)

    def was_delivered(self, key: MessageKey) -> bool:
        delivered = self._delivered
        return delivered is not None and key in delivered

    def delivered_keys(self) -> list[MessageKey]:
        """The keys of ``delivered``, in order, without making it."""
        return sorted(self._delivered) if self._delivered else []

    def unwatched(self, topic: str) -> list[MessageKey]:
        """The delivered messages of ``topic`` whose acknowledgement is awaited nowhere yet (read
        back from the record after a restart)."""
        delivered = self._delivered
        if not delivered:
            return []
        return [key for key, watch in delivered.items() if watch is None and key[0] == topic]

    def unwatch(self, cursors: Sequence[AckedOnDisk]) -> None:
        """The acknowledgements awaited on ``cursors`` will not be seen there (the owner's
        answer is lost): their messages' keys are awaited nowhere (``unwatched``)."""
        delivered = self._delivered
        if not delivered:
            return
        lost = {id(cursor) for cursor in cursors}
        for key, watch in delivered.items():
            if watch is not None and id(watch.cursor) in lost:
                delivered[key] = None

    def watch_delivered(self, topic: str, cursor: AckedOnDisk) -> None:
        """The session's subscription on ``topic`` is served from ``cursor``: the acknowledgements
        of its delivered messages not yet watched are awaited there."""
        if self._delivered:
            for key, watch in self._delivered.items():
                if watch is None and key[0] == topic:
                    self._delivered[key] = Watch(cursor)

    def prune_delivered(self) -> bool:
        """Forget the delivered messages whose acknowledgement is on disk: acknowledged on their
        cursor, which has been flushed since it was seen there (or holds nothing unflushed).
        True when some were forgotten."""
        delivered = self._delivered
        if not delivered:
            return False
        gone = []
        for key, watch in delivered.items():
            if watch is None:
                continue
            cursor = watch.cursor
            if watch.seen_at is None:
                if not cursor.is_acked(Position(key[1], key[2])):
                    continue
                watch.seen_at = cursor.persists
            if not cursor.dirty or cursor.persists > watch.seen_at:
                gone.append(key)
        for key in gone:
            del delivered[key]
        return bool(gone)


def expires_at(expiry: int, disconnected_at: float | None, now: float) -> float | None:
    """When a session whose connection closed at ``disconnected_at`` ends (wall-clock seconds);
    None if never. A session found open after a crash (``disconnected_at`` None) counts from
    ``now``: the crash's time is not known, and the standard counts from the closing of the
    connection, which cannot have been later than the restart."""
    if expiry == NEVER:
        return None
    return (now if disconnected_at is None else disconnected_at) + expiry
