"""What a consumer or producer needs of its client connection (Pulsar's ``TransportCnx``).

A ``Consumer`` and a ``Producer`` hold their connection through this Protocol, not as a
``ServerCnx``: they, and the dispatchers that see the connection only through the consumer,
sit below the connection and its handlers, and a test gives them a connection that records
what it is sent (``tests/broker/recording.py``). ``ServerCnx`` implements it.
"""

from __future__ import annotations

from typing import Protocol

from magnetar.protocol import wire


class TransportCnx(Protocol):
    @property
    def remote(self) -> str:
        """The peer's address, ``host:port`` (logs, the admin API's ``address``)."""
        ...

    @property
    def closed(self) -> bool:
        """The connection is lost or closed (its consumers are being removed)."""
        ...

    @property
    def writable(self) -> bool:
        """False while the peer does not read what is written (TCP flow control)."""
        ...

    @property
    def wants_entry_metadata(self) -> bool:
        """The client asked for the broker's entry metadata in its messages (at CONNECT)."""
        ...

    def send_command(self, command: wire.BaseCommand) -> None: ...

    def write_many(self, frames: list[bytes | memoryview]) -> None:
        """Frames already encoded, written with the others of this event-loop pass."""
        ...

    def send_close_consumer(self, consumer_id: int) -> None: ...

    def forget_consumer(self, consumer_id: int) -> None:
        """The consumer is gone: late FLOW/ACK for it are ignored."""
        ...

    def send_active_consumer_change(self, consumer_id: int, is_active: bool) -> None: ...

    def close_producer_by_broker(self, producer_id: int, producer: object) -> None:
        """Tell the client the broker closed ``producer``, if it is still the one registered
        under ``producer_id`` (a producer closed by its client may have left its id to another)."""
        ...
