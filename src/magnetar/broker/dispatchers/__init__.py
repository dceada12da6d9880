"""Dispatchers: one per subscription, each deciding which consumer gets which entry.

New subscription behaviours (broadcast with virtual cursors, chunk-aware) register here
with ``register_dispatcher`` without touching the existing ones.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.broker.dispatchers.single_active import SingleActiveConsumerDispatcher
from magnetar.protocol import wire

SubType = wire.CommandSubscribe.SubType

DispatcherFactory = Callable[..., Dispatcher]

_FACTORIES: dict[int, DispatcherFactory] = {
    SubType.Value("Exclusive"): lambda sub, **kw: SingleActiveConsumerDispatcher(sub, failover=False, **kw),
    SubType.Value("Failover"): lambda sub, **kw: SingleActiveConsumerDispatcher(sub, failover=True, **kw),
    SubType.Value("Shared"): lambda sub, **kw: SharedDispatcher(sub, **kw),
    SubType.Value("Key_Shared"): lambda sub, **kw: KeySharedDispatcher(sub, **kw),
}


def register_dispatcher(sub_type: int, factory: DispatcherFactory) -> None:
    _FACTORIES[sub_type] = factory


def create_dispatcher(sub_type: int, subscription, **kwargs) -> Dispatcher:
    try:
        factory = _FACTORIES[sub_type]
    except KeyError:
        raise LookupError(f"subscription type {SubType.Name(sub_type)} is not supported yet") from None
    return factory(subscription, **kwargs)


__all__ = ["Dispatcher", "create_dispatcher", "register_dispatcher"]
