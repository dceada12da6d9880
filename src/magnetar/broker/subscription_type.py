"""What kind of subscription a dispatcher serves (Pulsar's ``SubscriptionType``), one type for all:
the protocol's four (``CommandSubscribe.SubType``) and Magnetar's Broadcast, which a consumer asks
for with a property (``protocol.broadcast``) while declaring any of the four."""

from __future__ import annotations

import enum
from typing import TypeAlias

from magnetar.protocol import wire

_SubType = wire.CommandSubscribe.SubType
#: A SUBSCRIBE's declared type, as the wire has it.
SubTypeValue: TypeAlias = wire.CommandSubscribe.SubType.ValueType


class SubscriptionType(enum.Enum):
    """Each member's value is its name as stats show it (``type``)."""

    Exclusive = "Exclusive"
    Shared = "Shared"
    Failover = "Failover"
    Key_Shared = "Key_Shared"
    Broadcast = "Broadcast"

    @classmethod
    def of(cls, sub_type: SubTypeValue, broadcast: bool = False) -> SubscriptionType:
        """The type a SUBSCRIBE asks for: its declared ``sub_type``, or Broadcast when it asked for that."""
        return cls.Broadcast if broadcast else cls(_SubType.Name(sub_type))

    @property
    def shared(self) -> bool:
        """Messages go to several consumers, each its own: no cumulative ack (Pulsar's rule)."""
        return self in (SubscriptionType.Shared, SubscriptionType.Key_Shared)
