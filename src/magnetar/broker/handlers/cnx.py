"""The connection as its command handlers see it: a ``TransportCnx`` with the state and the
replies of the protocol's session (CONNECT's outcome, the producers and consumers on it, the
credentials).

The handlers take it, not ``ServerCnx``, so that they sit below the connection that calls them
(``connection.py`` imports ``HANDLERS``; nothing here imports ``connection.py``). ``ServerCnx``
implements it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from magnetar.broker.transport_cnx import TransportCnx

if TYPE_CHECKING:
    from magnetar.broker.auth_session import AuthSession
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.errors import BrokerError
    from magnetar.broker.flow_control import ReadHolds
    from magnetar.broker.producer import Producer
    from magnetar.broker.service import BrokerService
    from magnetar.protocol import Frame, FrameDecoder, ProtocolError


class HandlerCnx(TransportCnx, Protocol):
    service: BrokerService
    config: BrokerConfig
    decoder: FrameDecoder
    #: Why the connection is not read now (flow control); the handshake looks before a timeout.
    holds: ReadHolds
    auth: AuthSession
    connected: bool
    closed: bool
    protocol_version: int
    #: What the client called itself at CONNECT ("Pulsar-CPP-v4.2.0"...).
    client_version: str
    wants_entry_metadata: bool
    #: The frame handled again once its topic was opened off the loop (``access.opened_first``).
    rerun: Frame | None
    producers: dict[int, Producer]
    consumers: dict[int, Consumer]
    #: Spread topics whose LOOKUPs on this connection name their owner (``access.pin_to_owner``).
    owner_pinned: set[str] | None
    #: Spread topics a LOOKUP on this connection named the shared port for (``lookups.handle_lookup``).
    looked_up_spread: set[str] | None
    gone_producers: frozenset[int] | set[int]
    gone_consumers: frozenset[int] | set[int]

    def close(self) -> None: ...

    def send_error(self, request_id: int, exc: BrokerError | Exception) -> None: ...

    def protocol_error(self, exc: ProtocolError) -> None:
        """Log it, answer with an ERROR for the whole connection, and close."""
        ...

    def handle_again(self, frame: Frame) -> None: ...

    def forget_producer(self, producer_id: int) -> None: ...

    def next_close_request_id(self) -> int: ...

    def send_pending(self, size: int) -> None:
        """A send of ``size`` bytes goes to storage: counted until its receipt (flow control)."""
        ...

    def send_done(self, size: int) -> None: ...
