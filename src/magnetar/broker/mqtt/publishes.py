"""The PUBLISH packets of one stored entry, encoded once for every subscriber that gets them alike.

A broadcast subscription hands one entry to thousands of MQTT subscribers in one round. What
their packets hold depends only on the entry and on how the subscriber's filters deliver it
(``Delivery``: Topic Name, granted QoS, Retain As Published, Subscription Identifiers; a message
goes at the lower of the granted QoS and its own) and its protocol version, so the entry is
taken apart (``messages.from_entry``) and each of its messages encoded once per such kind of
subscriber; every subscriber of that kind is then written the same bytes. A QoS 1 or 2 packet
is kept as the bytes before its packet identifier and those after: each subscriber's
identifier (and DUP) goes between them when it is sent (``Outbound``), nothing is encoded again.

A message with a Message Expiry Interval is encoded for each subscriber as it goes (what is
left of its interval changes by the second), as is everything to a client that takes Topic
Aliases (the alias is the connection's own) and a message holding what MQTT cannot carry
(``Outbound._admit`` decides what becomes of it).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from typing import TYPE_CHECKING

from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt.messages import Outgoing, from_entry
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.mqtt import MQTT_5, Publish, encode
from magnetar.protocol.mqtt.properties import NONE
from magnetar.protocol.mqtt.sendable import sendable
from magnetar.varint import encode as varint

if TYPE_CHECKING:
    from magnetar.broker.mqtt.outbound import Delivery

#: A message's PUBLISH as sent to all of a kind: the whole packet (QoS 0), or the bytes before
#: and after its packet identifier (QoS 1 and 2); None: encoded per subscriber (it expires).
Encoded = bytes | tuple[bytes, bytes] | None


class EntryPublishes:
    """One entry's messages and their packets, per protocol version and ``Delivery``."""

    __slots__ = ("chunk", "entry", "messages", "v3", "v5")

    def __init__(self, entry: DispatchEntry) -> None:
        self.entry = entry
        #: A chunk of a large message (put together per consumer: ``chunks.py``).
        self.chunk = chunk_ref(entry.metadata) is not None
        #: Its messages; None for an entry an MQTT subscriber cannot be sent.
        self.messages: list[Outgoing] | None = None if self.chunk else from_entry(entry)
        #: Delivery -> each message's packet, to MQTT 3.1.1 and to 5.0 clients (a ``Delivery`` is
        #: shared by the consumers that deliver alike: ``outbound.delivery``).
        self.v3: dict[Delivery, list[Encoded]] = {}
        self.v5: dict[Delivery, list[Encoded]] = {}

    def encoded(self, version: int, delivery: Delivery) -> list[Encoded]:
        """Each message's packet as ``delivery`` sends it to a client of ``version``."""
        made = self.v5 if version == MQTT_5 else self.v3
        found = made.get(delivery)
        if found is None:
            assert self.messages is not None
            found = made[delivery] = _encode_all(version, delivery, self.messages)
        return found


def packet(version: int, delivery: Delivery, message: Outgoing, expires_in: int | None = None) -> Publish:
    """``message`` as ``delivery`` sends it (QoS 1 and 2 without a packet identifier yet);
    ``expires_in``: what is left of its Message Expiry Interval (5.0, 3.3.2.3.3)."""
    properties = NONE
    if version == MQTT_5:
        properties = message.mqtt
        if message.properties:
            properties = properties.replace(user_properties=message.properties)
        if expires_in is not None:
            properties = properties.replace(message_expiry_interval=expires_in)
        if delivery.subscription_ids:
            properties = properties.replace(subscription_identifiers=delivery.subscription_ids)
    retain = delivery.retain_as_published and message.retain  # else 0 to a subscription (3.3.1.3)
    qos = min(delivery.qos, message.qos)  # never above the QoS it was published with (3.3.5, 3.8.4)
    return Publish(delivery.mqtt_topic, message.payload, qos, retain, properties=properties)


def _encode_all(version: int, delivery: Delivery, messages: list[Outgoing]) -> list[Encoded]:
    """Each message's packet. The messages of a batch mostly differ in their payload alone: a
    run of messages with the same properties, RETAIN and QoS as the one before shares its
    packet's bytes around the payload (``_Shape``), worked out once for the run, and each one's
    packet is its fixed header, those bytes and its payload."""
    out: list[Encoded] = []
    shape: _Shape | None = None
    last: Outgoing | None = None
    for message in messages:
        if message.expires_at is not None:
            out.append(None)  # what is left of its interval goes in per subscriber
            continue
        if (
            last is None
            or message.properties is not last.properties
            or message.mqtt is not last.mqtt
            or message.retain != last.retain
            or message.qos != last.qos
        ):
            shape = _shape_of(version, delivery, message)
            last = message
        if shape is None:
            out.append(None)  # something MQTT cannot carry: per subscriber (``Outbound._admit``)
            continue
        first, name, properties, qos = shape
        payload = message.payload
        size = len(name) + len(properties) + len(payload)
        if not qos:
            out.append(b"".join((first, varint(size), name, properties, payload)))
        else:
            tail = properties + payload if properties else payload
            out.append((first + varint(size + 2) + name, tail))
    return out


#: A PUBLISH's bytes but its Remaining Length, packet identifier and payload: its first byte,
#: the Topic Name (length in front), the properties (5.0; empty for 3.1.1) and its QoS.
_Shape = tuple[bytes, bytes, bytes, int]


#: Shapes worked out lately, by protocol version, ``Delivery``, the message's properties (both
#: kept by identity: the same objects for every message whose properties have the same bytes,
#: ``messages._rest_of``), RETAIN and QoS; each kept with the objects it was made for, so a key
#: whose objects are gone and whose ids were taken again is never another's. Shapes of at most
#: ``_SHAPE_KEPT_MAX`` bytes, cleared past ``_SHAPES_MAX``.
_SHAPES: dict[tuple[int, int, int, int, bool, int], tuple[Delivery, object, object, _Shape | None]] = {}
_SHAPES_MAX = 1024
_SHAPE_KEPT_MAX = 2048


def _shape_of(version: int, delivery: Delivery, message: Outgoing) -> _Shape | None:
    """``_shape``, once for a kind of message and subscriber rather than once an entry."""
    key = (version, id(delivery), id(message.properties), id(message.mqtt), message.retain, message.qos)
    hit = _SHAPES.get(key)
    if hit is not None and hit[0] is delivery and hit[1] is message.properties and hit[2] is message.mqtt:
        return hit[3]
    shape = _shape(version, delivery, message)
    if shape is None or len(shape[1]) + len(shape[2]) <= _SHAPE_KEPT_MAX:  # large ones made again
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[key] = (delivery, message.properties, message.mqtt, shape)
    return shape


def _shape(version: int, delivery: Delivery, message: Outgoing) -> _Shape | None:
    """The bytes ``message``'s PUBLISH has around its payload, read back from the packet encoded
    without one; None when it cannot go as it is (``sendable``)."""
    publish = dataclasses.replace(packet(version, delivery, message), payload=b"")
    if sendable(publish)[1]:
        return None
    qos = publish.qos
    data = encode(dataclasses.replace(publish, packet_id=0) if qos else publish, version)
    at = 1
    while data[at] & 0x80:
        at += 1
    at += 1
    name_end = at + 2 + (data[at] << 8 | data[at + 1])
    return data[:1], data[at:name_end], data[name_end + (2 if qos else 0) :], qos


#: Entries prepared lately: a broadcast subscription sends one entry to many MQTT subscribers in
#: a round. Keyed by the entry object, which is kept alive by its slot, so the key is never
#: another entry's. At most ``_PREPARED_MAX`` entries of at most ``_PREPARED_BYTES`` bytes
#: together (each kept with its messages and their packets: a few times its size).
_PREPARED: OrderedDict[int, EntryPublishes] = OrderedDict()
_PREPARED_MAX = 256
_PREPARED_BYTES = 32 * 1024 * 1024
_held = [0]


def prepared(entry: DispatchEntry) -> EntryPublishes:
    """``EntryPublishes`` of ``entry``, made once for all the subscribers it goes to."""
    key = id(entry)
    hit = _PREPARED.get(key)
    if hit is not None and hit.entry is entry:
        return hit
    made = EntryPublishes(entry)
    if hit is not None:
        del _PREPARED[key]
        _held[0] -= len(hit.entry.data)
    _PREPARED[key] = made
    _held[0] += len(entry.data)
    while len(_PREPARED) > _PREPARED_MAX or (_held[0] > _PREPARED_BYTES and len(_PREPARED) > 1):
        _, old = _PREPARED.popitem(last=False)
        _held[0] -= len(old.entry.data)
    return made
