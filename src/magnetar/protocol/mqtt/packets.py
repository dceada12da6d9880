"""MQTT's control packets as values: one frozen dataclass per packet type (2.1.2), the same for
3.1.1 and 5.0. What 3.1.1 lacks (properties, reason codes but CONNACK's return code and SUBACK's
granted QoS) is left at its default there; ``codec.encode`` refuses a packet that 3.1.1 cannot
carry rather than drop part of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from magnetar.protocol.mqtt.codes import PacketType
from magnetar.protocol.mqtt.properties import NONE, Properties

__all__ = [
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "Packet",
    "PingReq",
    "PingResp",
    "PubAck",
    "PubComp",
    "PubRec",
    "PubRel",
    "Publish",
    "PublishAck",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Will",
]


@dataclass(frozen=True, slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = NONE


@dataclass(frozen=True, slots=True)
class Connect:
    client_id: str
    #: 4 (MQTT 3.1.1) or 5 (MQTT 5.0).
    protocol_level: int = 5
    #: Clean Start (5.0) / Clean Session (3.1.1).
    clean_start: bool = True
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = NONE
    type = PacketType.CONNECT


@dataclass(frozen=True, slots=True)
class ConnAck:
    session_present: bool = False
    #: A 3.1.1 return code (``ConnectReturnCode``) or a 5.0 reason code.
    reason_code: int = 0
    properties: Properties = NONE
    type = PacketType.CONNACK


@dataclass(frozen=True, slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    #: Present exactly when qos > 0.
    packet_id: int | None = None
    properties: Properties = NONE
    type = PacketType.PUBLISH


@dataclass(frozen=True, slots=True)
class _PublishAckFields:
    """What the acknowledgements of a PUBLISH carry, alike on the wire (3.4 ... 3.7): each is one
    of the four kinds below, told apart by its class (a PubAck never equals a PubRec)."""

    packet_id: int
    reason_code: int = 0
    properties: Properties = NONE
    type: ClassVar[PacketType]


@dataclass(frozen=True, slots=True)
class PubAck(_PublishAckFields):
    type = PacketType.PUBACK


@dataclass(frozen=True, slots=True)
class PubRec(_PublishAckFields):
    type = PacketType.PUBREC


@dataclass(frozen=True, slots=True)
class PubRel(_PublishAckFields):
    type = PacketType.PUBREL


@dataclass(frozen=True, slots=True)
class PubComp(_PublishAckFields):
    type = PacketType.PUBCOMP


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE and its Subscription Options (3.8.3.1)."""

    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    #: 0: send retained messages at subscribe; 1: only if the subscription is new; 2: never.
    retain_handling: int = 0


@dataclass(frozen=True, slots=True)
class Subscribe:
    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties = NONE
    type = PacketType.SUBSCRIBE


@dataclass(frozen=True, slots=True)
class SubAck:
    packet_id: int
    #: Granted QoS (0, 1, 2) or a failure code, one per topic filter subscribed.
    reason_codes: tuple[int, ...]
    properties: Properties = NONE
    type = PacketType.SUBACK


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: tuple[str, ...]
    properties: Properties = NONE
    type = PacketType.UNSUBSCRIBE


@dataclass(frozen=True, slots=True)
class UnsubAck:
    packet_id: int
    #: One per topic filter (5.0); empty in 3.1.1, which has none.
    reason_codes: tuple[int, ...] = ()
    properties: Properties = NONE
    type = PacketType.UNSUBACK


@dataclass(frozen=True, slots=True)
class PingReq:
    type = PacketType.PINGREQ


@dataclass(frozen=True, slots=True)
class PingResp:
    type = PacketType.PINGRESP


@dataclass(frozen=True, slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = NONE
    type = PacketType.DISCONNECT


@dataclass(frozen=True, slots=True)
class Auth:
    """MQTT 5 only."""

    reason_code: int = 0
    properties: Properties = NONE
    type = PacketType.AUTH


Packet = (
    Connect
    | ConnAck
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)
#: The acknowledgements of PUBLISH.
PublishAck = PubAck | PubRec | PubRel | PubComp
