"""What a producer or consumer uses of the client that made it.

Handlers (handler.py and its subclasses, the partitioned producer, the multi-topics and pattern
consumers) see their client through ``ClientServices``: a lookup that ends in a pooled
connection, ids, timeouts and backoff, and the namespace queries a factory or a pattern needs.
They never import ``Client``, which imports them to build them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from magnetar.client.connection import Connection
    from magnetar.protocol import pulsar_wire_pb2 as wire


class Closable(Protocol):
    """A handler the client closes with itself."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class ClientServices(Protocol):
    """The client as its handlers see it (``magnetar.client.client.Client`` is one)."""

    @property
    def operation_timeout(self) -> float: ...

    @property
    def initial_backoff(self) -> float: ...

    @property
    def max_backoff(self) -> float: ...

    def new_producer_id(self) -> int: ...

    def new_consumer_id(self) -> int: ...

    async def connection_for_topic(self, topic: str) -> Connection:
        """The connection to the broker that owns ``topic`` (looked up, pooled)."""
        ...

    async def get_partitioned_topic_metadata(self, topic: str) -> int: ...

    async def get_topics_of_namespace(
        self,
        namespace: str,
        mode: wire.CommandGetTopicsOfNamespace.Mode.ValueType,
        topics_hash: str | None = None,
        topics_pattern: str | None = None,
    ) -> wire.CommandGetTopicsOfNamespaceResponse: ...

    def forget(self, handler: Closable) -> None:
        """``handler`` closed: the client no longer closes it with itself."""
        ...
