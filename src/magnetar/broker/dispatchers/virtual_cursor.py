"""A broadcast consumer's light cursor: how far it has read and acknowledged.

The broadcast subscription has one real (stored) cursor. Each consumer gets a virtual cursor,
a few positions and small sets: where it reads next, the entry up to which it has acknowledged
everything (its mark-delete position), the entries it acknowledged past that, batches it
acknowledged in part, and what it asked to have sent again. The subscription's cursor moves to
the lowest mark-delete position of its consumers (``PositionFloor``). The acknowledged part is
kept durable, by consumer name, as a ``VirtualCursorState`` on the subscription's cursor
(``storage.virtual_cursors``; ``broadcast_saved``).
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.dispatchers.replay_queue import ReplayQueue
from magnetar.storage import batch_acks
from magnetar.storage.position import Position
from magnetar.storage.virtual_cursors import VirtualCursorState

#: The position after a given one, crossing ledgers (``ManagedLedger.next_position``).
NextPosition = Callable[[Position], Position]
#: True when the subscription's cursor already holds a position as acknowledged for everyone.
Settled = Callable[[Position], bool]


class VirtualCursor:
    """Where one broadcast consumer is. Its sets are made when first needed: a consumer that
    acknowledges cumulatively and is never sent anything again (the usual one) holds none, so
    100K idle cursors cost little memory, and an ack costs a position store and a few checks."""

    __slots__ = (
        "_acked",
        "connected_since",
        "last_ack",
        "mark_delete",
        "partial_batches",
        "read_position",
        "redelivered",
        "replay_queue",
        "restored_until",
    )

    def __init__(self, mark_delete: Position, read_position: Position) -> None:
        self.mark_delete = mark_delete
        self.read_position = read_position
        #: Entries acknowledged past ``mark_delete``.
        self._acked: set[Position] | None = None
        #: Batches acknowledged in part: position -> unsigned words, a set bit still unacked
        #: (None when there are none; read-only outside this class, like ``redelivered``).
        self.partial_batches: dict[Position, list[int]] | None = None
        #: Entries this consumer asked for again (nack, ack timeout), sent before new ones
        #: (None, or empty, when there are none: the dispatcher's per-delivery check).
        self.replay_queue: ReplayQueue | None = None
        #: How often each entry was sent again to this consumer.
        self.redelivered: dict[Position, int] | None = None
        #: Restored from a stored state with entries acknowledged past the read position: up to here,
        #: entries read must be checked against them (None once read past, the usual case).
        self.restored_until: Position | None = None
        #: When its consumer subscribed and last acknowledged (``coarse_clock``; 0.0: never), for stats.
        self.connected_since = 0.0
        self.last_ack = 0.0

    def __repr__(self) -> str:
        return f"VirtualCursor(mark_delete={self.mark_delete}, read={self.read_position})"

    @classmethod
    def from_state(cls, state: VirtualCursorState, read_position: Position) -> VirtualCursor:
        """A cursor as stored (after a restart): acknowledged as it was, nothing in flight."""
        vc = cls(state.mark_delete, read_position)
        if state.acked:
            vc._acked = set(state.acked)
            vc.restored_until = max(state.acked)
        if state.partial:
            vc.partial_batches = {position: list(words) for position, words in state.partial}
        return vc

    def state(
        self, shared: dict[Position, VirtualCursorState] | None = None, epoch: int = 0
    ) -> VirtualCursorState:
        """What this consumer has acknowledged, to be stored (marked with ``epoch``, the
        subscription's resets known: ``VirtualCursorState.epoch``). Cursors with nothing
        acknowledged past their mark-delete position take their state from ``shared`` when given
        (consumers that keep up share one state object, which storage then encodes once; one
        ``shared`` is for one epoch)."""
        batches = self.partial_batches
        if not self._acked and not batches:
            if shared is None:
                return VirtualCursorState(self.mark_delete, epoch=epoch)
            state = shared.get(self.mark_delete)
            if state is None:
                state = shared[self.mark_delete] = VirtualCursorState(self.mark_delete, epoch=epoch)
            return state
        partial = tuple((p, tuple(w)) for p, w in batches.items()) if batches else ()
        acked = tuple(self._acked) if self._acked else ()
        return VirtualCursorState(self.mark_delete, acked, partial, epoch)

    @property
    def replay(self) -> ReplayQueue:
        """The entries to send again (made on first use)."""
        queue = self.replay_queue
        if queue is None:
            queue = self.replay_queue = ReplayQueue()
        return queue

    @property
    def redelivery_counts(self) -> dict[Position, int]:
        """How often each entry was sent again (made on first use)."""
        counts = self.redelivered
        if counts is None:
            counts = self.redelivered = {}
        return counts

    def redelivery_count(self, position: Position) -> int:
        counts = self.redelivered
        return counts.get(position, 0) if counts else 0

    @property
    def acked_count(self) -> int:
        """Entries acknowledged past ``mark_delete``."""
        return len(self._acked) if self._acked else 0

    def is_acked(self, position: Position) -> bool:
        return position <= self.mark_delete or (self._acked is not None and position in self._acked)

    def ack(self, position: Position) -> None:
        """An individual ack; call ``advance`` after a run of them."""
        if position > self.mark_delete:
            if self._acked is None:
                self._acked = set()
            self._acked.add(position)
            self._forget(position)

    def ack_through(self, position: Position) -> None:
        """A cumulative ack: everything up to ``position``."""
        if position <= self.mark_delete:
            return
        self.mark_delete = position
        if self._acked or self.partial_batches or self.redelivered or self.replay_queue is not None:
            self._drop_up_to(position)

    def ack_batch_indexes(self, position: Position, unacked_words: list[int], batch_size: int) -> bool:
        """AND a batch's still-unacked bits into what this consumer left unacked of it.

        True when no message of the batch is left, and then the entry counts as acknowledged.
        """
        if self.is_acked(position):
            return True
        words = batch_acks.clip(unacked_words, batch_size)
        partial = self.partial_batches
        previous = partial.get(position) if partial else None
        if previous is not None:
            words = batch_acks.intersect(previous, words)
        if not any(words):
            if partial:
                partial.pop(position, None)
            return True
        if partial is None:
            partial = self.partial_batches = {}
        partial[position] = words
        return False

    def batch_ack_set(self, position: Position) -> list[int] | None:
        """The MESSAGE ``ack_set`` of a batch sent again: what is left unacked of it, if anything
        was acknowledged."""
        words = self.partial_batches.get(position) if self.partial_batches else None
        return batch_acks.to_signed(words) if words is not None else None

    def advance(self, next_position: NextPosition, settled: Settled | None) -> bool:
        """Move ``mark_delete`` over the acknowledged run after it; True if it moved.

        ``settled`` None: the subscription holds no entry acknowledged for everyone past its
        mark-delete position, so only this cursor's own acks can extend the run.
        """
        acked = self._acked
        if not acked and settled is None:
            return False
        moved = False
        partial = self.partial_batches
        while True:
            following = next_position(self.mark_delete)
            if acked and following in acked:
                acked.discard(following)
            elif settled is None or not settled(following):
                return moved
            self.mark_delete = following
            moved = True
            if partial:
                partial.pop(following, None)

    def skip_to(self, position: Position, next_position: NextPosition) -> None:
        """The subscription acknowledged everything up to ``position`` for all (skip, expiry,
        backlog eviction): this consumer neither waits for it nor reads it."""
        if position > self.mark_delete:
            self.mark_delete = position
            self._drop_up_to(position)
        if self.read_position <= position:
            self.read_position = next_position(position)

    def _forget(self, position: Position) -> None:
        if self.partial_batches:
            self.partial_batches.pop(position, None)
        if self.replay_queue is not None:
            self.replay_queue.discard(position)
        if self.redelivered:
            self.redelivered.pop(position, None)

    def _drop_up_to(self, position: Position) -> None:
        if self._acked:
            self._acked = {p for p in self._acked if p > position} or None
        if self.partial_batches:
            self.partial_batches = {p: w for p, w in self.partial_batches.items() if p > position} or None
        if self.redelivered:
            self.redelivered = {p: n for p, n in self.redelivered.items() if p > position} or None
        queue = self.replay_queue
        if queue is not None:
            queue.discard_up_to(position)
            if not len(queue):
                self.replay_queue = None
