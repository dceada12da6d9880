"""What orders entries against each other on Shared and Key_Shared subscriptions.

Two things tie an entry to others: the chunked message (PIP 37) it is a chunk of, whose
chunks must all reach one consumer in order, and on Key_Shared its key hash, whose entries
must reach consumers in publish order. A ``Route`` names both; its ``tags`` are what the
dispatcher holds back together (an entry waits while an earlier one with a tag of its own
waits).

``ChunkOwners`` keeps which consumer receives each chunked message now. The consumer its
first chunk goes to owns the message until its last chunk is sent; every later chunk goes
there, however long that consumer takes to give permits (those chunks wait, other entries
go on to other consumers). The owner is released early when it leaves or gives the
message's chunks back for redelivery; the first chunk then picks a consumer again.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from magnetar.protocol.chunks import ChunkRef

C = TypeVar("C")


class Route:
    """The chunk an entry is (if any) and its key hash (Key_Shared only)."""

    __slots__ = ("chunk", "key_hash", "tags")

    def __init__(self, chunk: ChunkRef | None = None, key_hash: int | None = None) -> None:
        self.chunk = chunk
        self.key_hash = key_hash
        #: Held back together: the message's uuid (a str) and the key hash (an int).
        tags: tuple[str | int, ...] = () if key_hash is None else (key_hash,)
        self.tags = tags if chunk is None else (*tags, chunk.uuid)

    def __repr__(self) -> str:
        return f"Route(chunk={self.chunk}, key_hash={self.key_hash})"


#: The route of a whole message on a Shared subscription: nothing ties it to other entries.
NO_ROUTE = Route()


class ChunkOwners(Generic[C]):
    """The consumer receiving each chunked message in flight, by uuid."""

    def __init__(self) -> None:
        self._owners: dict[str, C] = {}

    def __len__(self) -> int:
        return len(self._owners)

    def owner(self, uuid: str) -> C | None:
        return self._owners.get(uuid)

    def sent(self, chunk: ChunkRef, consumer: C) -> None:
        """``chunk`` goes to ``consumer``: a first chunk claims the message, the last releases it.

        A later chunk of a message nobody owns (its first chunk was acknowledged, or lies before a
        seek) claims nothing: the consumer cannot assemble it and will discard it.
        """
        if chunk.last:
            self._owners.pop(chunk.uuid, None)
        elif chunk.chunk_id == 0 or chunk.uuid in self._owners:
            self._owners[chunk.uuid] = consumer

    def release(self, uuid: str) -> None:
        self._owners.pop(uuid, None)

    def release_consumer(self, consumer: C) -> None:
        """``consumer`` left or gave everything back: its messages pick a consumer again."""
        for uuid in [u for u, owner in self._owners.items() if owner is consumer]:
            del self._owners[uuid]

    def clear(self) -> None:
        self._owners.clear()
