"""Magnetar's one extension of the protocol: asking for a broadcast subscription.

Pulsar has no subscription type in which every consumer receives every message, and a new
``SubType`` number would be refused by the official clients. A consumer asks for one with a
property instead, either a subscription property or one of its own consumer properties (the
official Python client can send only the latter); it declares any subscription type.
"""

from __future__ import annotations

from magnetar.protocol import wire

BROADCAST_PROPERTY = "magnetar.subscription.type"
BROADCAST_VALUE = "Broadcast"


def wants_broadcast(cmd: wire.CommandSubscribe) -> bool:
    """True when a SUBSCRIBE asks for a broadcast subscription, by either kind of property."""
    return any(
        kv.key == BROADCAST_PROPERTY and kv.value == BROADCAST_VALUE
        for kv in (*cmd.subscription_properties, *cmd.metadata)
    )
