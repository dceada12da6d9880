"""Dispatchers: one per subscription, each deciding which consumer gets which entry.

A dispatcher is chosen by the subscription's type (``SubscriptionType``): one of the protocol's
subscription types, or Broadcast, a behaviour the protocol has no type for. A new behaviour is a
new ``SubscriptionType`` member and a ``register_dispatcher`` call, without touching the existing
dispatchers. Every type carries chunked messages whole (Shared and Key_Shared through
``routes.ChunkOwners``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.broker.dispatchers.single_active import SingleActiveConsumerDispatcher
from magnetar.broker.subscription_type import SubscriptionType

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription

DispatcherFactory = Callable[..., Dispatcher]

_FACTORIES: dict[SubscriptionType, DispatcherFactory] = {
    SubscriptionType.Exclusive: lambda sub, **kw: SingleActiveConsumerDispatcher(sub, failover=False, **kw),
    SubscriptionType.Failover: lambda sub, **kw: SingleActiveConsumerDispatcher(sub, failover=True, **kw),
    SubscriptionType.Shared: lambda sub, **kw: SharedDispatcher(sub, **kw),
    SubscriptionType.Key_Shared: lambda sub, **kw: KeySharedDispatcher(sub, **kw),
    SubscriptionType.Broadcast: lambda sub, **kw: BroadcastDispatcher(sub, **kw),
}


def register_dispatcher(kind: SubscriptionType, factory: DispatcherFactory) -> None:
    _FACTORIES[kind] = factory


def create_dispatcher(
    kind: SubscriptionType, subscription: CursorSubscription[Consumer], **kwargs: int
) -> Dispatcher:
    try:
        factory = _FACTORIES[kind]
    except KeyError:
        raise LookupError(f"subscription type {kind.value} is not supported yet") from None
    return factory(subscription, **kwargs)


__all__ = ["Dispatcher", "SubscriptionType", "create_dispatcher", "register_dispatcher"]
