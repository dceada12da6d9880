"""Magnetar's one extension of the protocol: asking for a broadcast subscription.

Pulsar has no subscription type in which every consumer receives every message, and a new
``SubType`` number would be refused by the official clients. A consumer asks for one with a
property instead, either a subscription property or one of its own consumer properties (the
official Python client can send only the latter); it declares any subscription type.
"""

from __future__ import annotations

BROADCAST_PROPERTY = "magnetar.subscription.type"
BROADCAST_VALUE = "Broadcast"
