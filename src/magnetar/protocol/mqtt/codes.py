"""MQTT's numbers: packet types, protocol levels, MQTT 5 reason codes and MQTT 3.1.1 return codes.

Names follow the standards (MQTT 3.1.1, OASIS 2014; MQTT 5.0, OASIS 2019), section 2.1.2 for the
packet types and 2.4 (5.0) / 3.2.2.3 (3.1.1) for the codes.
"""

from __future__ import annotations

from enum import IntEnum

#: The protocol levels spoken: CONNECT's "Protocol Level" byte.
MQTT_3_1_1 = 4
MQTT_5 = 5
VERSIONS = (MQTT_3_1_1, MQTT_5)
#: The largest Remaining Length a Variable Byte Integer can hold (four bytes).
MAX_REMAINING_LENGTH = 268_435_455
#: The largest packet: a fixed header of five bytes and the largest Remaining Length.
MAX_PACKET_SIZE = MAX_REMAINING_LENGTH + 5


class PacketType(IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15  # MQTT 5 only


class ReasonCode(IntEnum):
    """MQTT 5's reason codes (2.4); 0 is Success, Normal disconnection and Granted QoS 0 alike."""

    SUCCESS = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


def _codes(*codes: int) -> frozenset[int]:
    return frozenset(codes)


#: The reason codes each MQTT 5 packet may carry (3.2.2.2, 3.4.2.1 ... 3.15.2.1); any other is a
#: Malformed Packet.
ALLOWED_REASONS: dict[PacketType, frozenset[int]] = {
    PacketType.CONNACK: _codes(
        0x00,
        0x80,
        0x81,
        0x82,
        0x83,
        0x84,
        0x85,
        0x86,
        0x87,
        0x88,
        0x89,
        0x8A,
        0x8C,
        0x90,
        0x95,
        0x97,
        0x99,
        0x9A,
        0x9B,
        0x9C,
        0x9D,
        0x9F,
    ),
    PacketType.PUBACK: _codes(0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99),
    PacketType.PUBREC: _codes(0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99),
    PacketType.PUBREL: _codes(0x00, 0x92),
    PacketType.PUBCOMP: _codes(0x00, 0x92),
    PacketType.SUBACK: _codes(0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2),
    PacketType.UNSUBACK: _codes(0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91),
    PacketType.DISCONNECT: _codes(
        0x00,
        0x04,
        0x80,
        0x81,
        0x82,
        0x83,
        0x87,
        0x89,
        0x8B,
        0x8D,
        0x8E,
        0x8F,
        0x90,
        0x93,
        0x94,
        0x95,
        0x96,
        0x97,
        0x98,
        0x99,
        0x9A,
        0x9B,
        0x9C,
        0x9D,
        0x9E,
        0x9F,
        0xA0,
        0xA1,
        0xA2,
    ),
    PacketType.AUTH: _codes(0x00, 0x18, 0x19),
}


class ConnectReturnCode(IntEnum):
    """MQTT 3.1.1's CONNACK return codes (3.2.2.3)."""

    ACCEPTED = 0
    UNACCEPTABLE_PROTOCOL_VERSION = 1
    IDENTIFIER_REJECTED = 2
    SERVER_UNAVAILABLE = 3
    BAD_USER_NAME_OR_PASSWORD = 4
    NOT_AUTHORIZED = 5


#: MQTT 3.1.1's SUBACK return code for a refused subscription (3.9.3).
SUBACK_FAILURE_3_1_1 = 0x80
