"""A broadcast consumer's light cursor: how far it has read and acknowledged.

The broadcast subscription has one real (stored) cursor. Each consumer gets a virtual cursor,
a few positions and small sets: where it reads next, the entry up to which it has acknowledged
everything (its mark-delete position), the entries it acknowledged past that, batches it
acknowledged in part, and what it asked to have sent again. The subscription's cursor moves to
the lowest mark-delete position of its consumers (``PositionFloor``). The acknowledged part is
kept durable as a ``Place`` of the subscription's cursor (``storage.places``), by consumer name.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.dispatchers.replay_queue import ReplayQueue
from magnetar.storage import batch_acks
from magnetar.storage.places import Place
from magnetar.storage.position import Position

#: The position after a given one, crossing ledgers (``ManagedLedger.next_position``).
NextPosition = Callable[[Position], Position]
#: True when the subscription's cursor already holds a position as acknowledged for everyone.
Settled = Callable[[Position], bool]


class VirtualCursor:
    __slots__ = (
        "_acked",
        "_partial",
        "connected_since",
        "last_ack",
        "mark_delete",
        "read_position",
        "redelivery_counts",
        "replay",
        "restored_until",
    )

    def __init__(self, mark_delete: Position, read_position: Position) -> None:
        self.mark_delete = mark_delete
        self.read_position = read_position
        #: Entries acknowledged past ``mark_delete``.
        self._acked: set[Position] = set()
        #: Batches acknowledged in part: position -> unsigned words, a set bit still unacked.
        self._partial: dict[Position, list[int]] = {}
        #: Entries this consumer asked for again (nack, ack timeout), sent before new ones.
        self.replay = ReplayQueue()
        #: How often each entry was sent again to this consumer.
        self.redelivery_counts: dict[Position, int] = {}
        #: Restored from a place with entries acknowledged past the read position: up to here,
        #: entries read must be checked against them (None once read past, the usual case).
        self.restored_until: Position | None = None
        #: When its consumer subscribed and last acknowledged (``coarse_clock``; 0.0: never), for stats.
        self.connected_since = 0.0
        self.last_ack = 0.0

    def __repr__(self) -> str:
        return f"VirtualCursor(mark_delete={self.mark_delete}, read={self.read_position})"

    @classmethod
    def from_place(cls, place: Place, read_position: Position) -> VirtualCursor:
        """A cursor at a stored place (after a restart): acknowledged as it was, nothing in flight."""
        vc = cls(place.mark_delete, read_position)
        vc._acked.update(place.acked)
        vc.restored_until = max(place.acked) if place.acked else None
        for position, words in place.partial:
            vc._partial[position] = list(words)
        return vc

    def place(self) -> Place:
        """What this consumer has acknowledged, to be stored."""
        partial = tuple((p, tuple(w)) for p, w in self._partial.items()) if self._partial else ()
        return Place(self.mark_delete, tuple(self._acked) if self._acked else (), partial)

    @property
    def acked_count(self) -> int:
        """Entries acknowledged past ``mark_delete``."""
        return len(self._acked)

    def is_acked(self, position: Position) -> bool:
        return position <= self.mark_delete or position in self._acked

    def ack(self, position: Position) -> None:
        """An individual ack; call ``advance`` after a run of them."""
        if position > self.mark_delete:
            self._acked.add(position)
            self._forget(position)

    def ack_through(self, position: Position) -> None:
        """A cumulative ack: everything up to ``position``."""
        if position <= self.mark_delete:
            return
        self.mark_delete = position
        self._drop_up_to(position)

    def ack_batch_indexes(self, position: Position, unacked_words: list[int], batch_size: int) -> bool:
        """AND a batch's still-unacked bits into what this consumer left unacked of it.

        True when no message of the batch is left, and then the entry counts as acknowledged.
        """
        if self.is_acked(position):
            return True
        words = batch_acks.clip(unacked_words, batch_size)
        previous = self._partial.get(position)
        if previous is not None:
            words = batch_acks.intersect(previous, words)
        if not any(words):
            self._partial.pop(position, None)
            return True
        self._partial[position] = words
        return False

    def batch_ack_set(self, position: Position) -> list[int] | None:
        """The MESSAGE ``ack_set`` of a batch sent again: what is left unacked of it, if anything
        was acknowledged."""
        words = self._partial.get(position)
        return batch_acks.to_signed(words) if words is not None else None

    def advance(self, next_position: NextPosition, settled: Settled) -> bool:
        """Move ``mark_delete`` over the acknowledged run after it; True if it moved."""
        moved = False
        acked = self._acked
        while True:
            following = next_position(self.mark_delete)
            if following in acked:
                acked.discard(following)
            elif not settled(following):
                return moved
            self.mark_delete = following
            moved = True
            self._partial.pop(following, None)

    def skip_to(self, position: Position, next_position: NextPosition) -> None:
        """The subscription acknowledged everything up to ``position`` for all (skip, expiry,
        backlog eviction): this consumer neither waits for it nor reads it."""
        if position > self.mark_delete:
            self.mark_delete = position
            self._drop_up_to(position)
        if self.read_position <= position:
            self.read_position = next_position(position)

    def _forget(self, position: Position) -> None:
        self._partial.pop(position, None)
        self.replay.discard(position)
        self.redelivery_counts.pop(position, None)

    def _drop_up_to(self, position: Position) -> None:
        for stale in [p for p in self._acked if p <= position]:
            self._acked.discard(stale)
        for stale in [p for p in self._partial if p <= position]:
            del self._partial[stale]
        for stale in [p for p in self.redelivery_counts if p <= position]:
            del self.redelivery_counts[stale]
        self.replay.discard_up_to(position)
