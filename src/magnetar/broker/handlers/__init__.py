"""The command handlers of a client connection (``ServerCnx``), one module per kind of command.

A handler is a plain function ``handle_<command type name, lower case>(cnx, frame)``; ``HANDLERS``
maps each command type to its handler, found by that name in the modules below. A command type
with no handler is a protocol error (``ServerCnx._handle``).

- ``handshake``: CONNECT, credentials and their refresh (AUTH_RESPONSE), PING/PONG
- ``lookups``: LOOKUP, PARTITIONED_METADATA, GET_TOPICS_OF_NAMESPACE, schemas
- ``producers``: PRODUCER, CLOSE_PRODUCER
- ``publish``: SEND and its checks (the hot path)
- ``consumers``: SUBSCRIBE, FLOW, ACK and the other commands of a consumer
- ``access``: what several handlers ask first (authorization, a topic opened off the loop)
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from magnetar.broker.handlers import consumers, handshake, lookups, producers, publish
from magnetar.protocol import Frame, wire

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx

Handler = Callable[["HandlerCnx", Frame], None]
MODULES: tuple[ModuleType, ...] = (handshake, lookups, producers, publish, consumers)


def handler_table(modules: tuple[ModuleType, ...] = MODULES) -> dict[int, Handler]:
    """Command type -> handler, by the handlers' names; a type handled twice is a mistake."""
    table: dict[int, Handler] = {}
    for name, number in wire.BaseCommand.Type.items():
        for module in modules:
            handler = getattr(module, f"handle_{name.lower()}", None)
            if handler is not None:
                if number in table:
                    raise RuntimeError(f"two handlers for {name}")
                table[number] = handler
    return table


HANDLERS = handler_table()
