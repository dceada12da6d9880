"""Topic Names, Topic Filters and how they match (4.7 in both standards; shared subscriptions 4.8.2
in 5.0).

- A Topic Name (PUBLISH) is at least one character and holds no wildcard (MQTT-3.3.2-2, 4.7.0-1).
- A Topic Filter (SUBSCRIBE, UNSUBSCRIBE) is at least one character; ``#`` only alone in the last
  level, ``+`` only alone in a level (MQTT-4.7.1-1 ... 4.7.1-3).
- ``$share/{ShareName}/{filter}``: a ShareName of at least one character without ``/``, ``+`` or
  ``#``, followed by a filter (MQTT-4.8.2-1, -2).
- Filters starting with a wildcard do not match names starting with ``$`` (MQTT-4.7.2-1).
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol.mqtt.codes import ReasonCode
from magnetar.protocol.mqtt.errors import MqttError, malformed, protocol_error

SHARE_PREFIX = "$share/"


def check_topic_name(name: str) -> None:
    """MqttError (Topic Name invalid) unless ``name`` is a Topic Name a PUBLISH may carry."""
    if not name:
        raise protocol_error("an empty Topic Name")
    if "+" in name or "#" in name:
        raise MqttError(ReasonCode.TOPIC_NAME_INVALID, f"Topic Name {name!r} holds a wildcard")


def check_topic_filter(topic_filter: str) -> None:
    """MqttError (Malformed Packet) unless ``topic_filter`` is a Topic Filter, shared or not."""
    if topic_filter.startswith(SHARE_PREFIX):
        shared_filter(topic_filter)
        return
    _check_plain_filter(topic_filter)


def _check_plain_filter(topic_filter: str) -> None:
    if not topic_filter:
        raise malformed("an empty Topic Filter")
    levels = topic_filter.split("/")
    last = len(levels) - 1
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != last):
            raise malformed(f"Topic Filter {topic_filter!r}: '#' must be a whole last level")
        if "+" in level and level != "+":
            raise malformed(f"Topic Filter {topic_filter!r}: '+' must be a whole level")


@dataclass(frozen=True, slots=True)
class SharedFilter:
    share_name: str
    topic_filter: str


def shared_filter(topic_filter: str) -> SharedFilter | None:
    """The parts of a ``$share/{ShareName}/{filter}``; None for a filter that is not shared;
    MqttError (Protocol Error) for one that starts so but is not well formed."""
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    share, slash, rest = topic_filter[len(SHARE_PREFIX) :].partition("/")
    if not share or "+" in share or "#" in share or not slash:
        raise protocol_error(f"shared subscription {topic_filter!r}: a ShareName and '/' must follow $share/")
    if not rest:
        raise protocol_error(f"shared subscription {topic_filter!r} has no Topic Filter")
    _check_plain_filter(rest)
    return SharedFilter(share, rest)


def has_wildcard(topic_filter: str) -> bool:
    return "+" in topic_filter or "#" in topic_filter


def matches(topic_filter: str, name: str) -> bool:
    """Whether the (valid, plain) ``topic_filter`` matches the Topic Name ``name``."""
    if not has_wildcard(topic_filter):
        return topic_filter == name
    if name.startswith("$") and topic_filter[0] in "+#":
        return False
    filter_levels = topic_filter.split("/")
    name_levels = name.split("/")
    for index, level in enumerate(filter_levels):
        if level == "#":
            return True  # also matches the parent level: "sport/#" matches "sport"
        if index >= len(name_levels):
            return False
        if level != "+" and level != name_levels[index]:
            return False
    return len(filter_levels) == len(name_levels)
