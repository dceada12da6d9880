"""Whether a PUBLISH made from a stored message can be encoded at all.

A Pulsar message may carry what MQTT cannot: a property holding U+0000 or more than 65,535
bytes of UTF-8, Correlation Data past 65,535 bytes, an expiry past a Four Byte Integer; a Pulsar
topic whose local name decodes to a wildcard, U+0000 or too long a Topic Name. The broker must
find that out before it gives the message a packet identifier or Topic Alias (its encoder raises
ValueError, which would otherwise end a connection for somebody else's message): a property that
cannot be encoded is left out, a Topic Name that cannot be one leaves the message unsendable.
"""

from __future__ import annotations

from magnetar.protocol.mqtt.packets import Publish
from magnetar.protocol.mqtt.primitives import MAX_UTF8_BYTES
from magnetar.protocol.mqtt.properties import NONE

#: The largest Four Byte Integer (Message Expiry Interval).
MAX_U32 = 0xFFFF_FFFF


def encodable_string(text: str) -> bool:
    """``text`` is an MQTT UTF-8 Encoded String (1.5.4): no U+0000, no surrogate, 65,535 bytes."""
    if "\x00" in text:
        return False
    try:
        return len(text.encode("utf-8")) <= MAX_UTF8_BYTES
    except UnicodeEncodeError:  # a lone surrogate
        return False


def topic_name_problem(topic: str) -> str | None:
    """Why ``topic`` cannot be a PUBLISH's Topic Name (4.7.3); None when it can."""
    if not topic:
        return "an empty Topic Name"
    if "+" in topic or "#" in topic:
        return f"the Topic Name {topic!r} holds a wildcard"
    if not encodable_string(topic):
        return f"the Topic Name {topic[:100]!r} is no MQTT string (U+0000, or over 65,535 bytes)"
    return None


def sendable(packet: Publish) -> tuple[Publish | None, list[str]]:
    """``packet`` as it can be encoded, and what was wrong: None when its Topic Name cannot be
    one; else the packet, without the properties that cannot be encoded (each named)."""
    problem = topic_name_problem(packet.topic)
    if problem is not None:
        return None, [problem]
    properties = packet.properties
    if properties is NONE:
        return packet, []
    dropped: list[str] = []
    changes: dict[str, object] = {}
    for name in ("content_type", "response_topic"):
        value = getattr(properties, name)
        if value is not None and not encodable_string(value):
            changes[name] = None
            dropped.append(name)
    data = properties.correlation_data
    if data is not None and len(data) > MAX_UTF8_BYTES:
        changes["correlation_data"] = None
        dropped.append("correlation_data")
    expiry = properties.message_expiry_interval
    if expiry is not None and expiry > MAX_U32:
        changes["message_expiry_interval"] = MAX_U32
    pairs = properties.user_properties
    kept = tuple(pair for pair in pairs if encodable_string(pair[0]) and encodable_string(pair[1]))
    if len(kept) != len(pairs):
        changes["user_properties"] = kept
        dropped.extend(f"user property {key[:100]!r}" for key, value in pairs if (key, value) not in kept)
    if not changes:
        return packet, dropped
    return Publish(
        packet.topic,
        packet.payload,
        packet.qos,
        packet.retain,
        packet.dup,
        packet.packet_id,
        properties.replace(**changes),
    ), dropped
