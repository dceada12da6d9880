"""Dispatchers: one per subscription, each deciding which consumer gets which entry.

A dispatcher is chosen by a *kind*: one of the protocol's subscription types, or a name for a
behaviour the protocol has no type for (``BROADCAST``). New behaviours register here with
``register_dispatcher`` without touching the existing ones. Every kind carries chunked
messages whole (Shared and Key_Shared through ``routes.ChunkOwners``).
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.dispatchers.base import Dispatcher
from magnetar.broker.dispatchers.broadcast import BroadcastDispatcher
from magnetar.broker.dispatchers.key_shared import KeySharedDispatcher
from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.broker.dispatchers.single_active import SingleActiveConsumerDispatcher
from magnetar.protocol import wire

SubType = wire.CommandSubscribe.SubType

DispatcherFactory = Callable[..., Dispatcher]
#: A subscription type's number, or the name of a kind without one.
Kind = int | str

BROADCAST = "Broadcast"

_FACTORIES: dict[Kind, DispatcherFactory] = {
    SubType.Value("Exclusive"): lambda sub, **kw: SingleActiveConsumerDispatcher(sub, failover=False, **kw),
    SubType.Value("Failover"): lambda sub, **kw: SingleActiveConsumerDispatcher(sub, failover=True, **kw),
    SubType.Value("Shared"): lambda sub, **kw: SharedDispatcher(sub, **kw),
    SubType.Value("Key_Shared"): lambda sub, **kw: KeySharedDispatcher(sub, **kw),
    BROADCAST: lambda sub, **kw: BroadcastDispatcher(sub, **kw),
}


def kind_name(kind: Kind) -> str:
    return kind if isinstance(kind, str) else SubType.Name(kind)


def register_dispatcher(kind: Kind, factory: DispatcherFactory) -> None:
    _FACTORIES[kind] = factory


def create_dispatcher(kind: Kind, subscription, **kwargs) -> Dispatcher:
    try:
        factory = _FACTORIES[kind]
    except KeyError:
        raise LookupError(f"subscription type {kind_name(kind)} is not supported yet") from None
    return factory(subscription, **kwargs)


__all__ = ["BROADCAST", "Dispatcher", "Kind", "create_dispatcher", "kind_name", "register_dispatcher"]
