"""Key_Shared: every key goes to one consumer at a time, in order.

Each entry's sticky key hashes into 0..65535 and a selector maps the hash to a consumer
(AUTO_SPLIT: ranges split as consumers join; STICKY: ranges the consumers declare).

Order when consumers come and go ("draining hashes", as Pulsar 4 does): when a hash moves
to another consumer while the previous holder still has unacknowledged entries of that
hash, no entry of that hash is dispatched until those are acknowledged (or given back).
Within a round, once an entry of a hash is held back, every later entry of that hash is
held back too, so nothing overtakes. Held-back entries wait in the replay queue, which is
served first and in publish order.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from magnetar.broker.dispatchers.shared import SharedDispatcher
from magnetar.broker.dispatchers.sticky_keys import (
    AutoSplitSelector,
    RangeConflict,
    StickySelector,
    sticky_key,
    sticky_key_hash,
)
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.errors import BrokerError, ConsumerBusy
from magnetar.protocol import wire
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.subscription import Subscription

#: Stop reading new entries while this many wait for their keys' consumers.
MAX_HELD_BACK = 10_000


def key_shared_mode(meta: wire.KeySharedMeta | None) -> int:
    return meta.key_shared_mode if meta is not None else wire.AUTO_SPLIT


def new_selector(mode: int) -> AutoSplitSelector | StickySelector:
    return StickySelector() if mode == wire.STICKY else AutoSplitSelector()


def join_selector(
    selector: AutoSplitSelector | StickySelector, consumer: Consumer, meta: wire.KeySharedMeta | None
) -> None:
    """Give a consumer its hash ranges (declared ones for STICKY); conflicts are the client's error."""
    try:
        if isinstance(selector, StickySelector):
            selector.add(consumer, [(r.start, r.end) for r in meta.hash_ranges] if meta is not None else [])
        else:
            selector.add(consumer)
    except RangeConflict as exc:
        raise BrokerError(str(exc), wire.ConsumerAssignError) from None


class KeySharedDispatcher(SharedDispatcher):
    def __init__(self, subscription: Subscription, max_read_batch: int = 100) -> None:
        super().__init__(subscription, max_read_batch)
        self.mode: int | None = None
        self.allow_out_of_order = False
        self.selector: AutoSplitSelector | StickySelector | None = None
        #: hash -> {consumer id(): unacknowledged entries of that hash it holds}
        self._holders: dict[int, dict[int, int]] = defaultdict(dict)
        self._entry_hash: dict[Position, int] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta
        mode = key_shared_mode(meta)
        if self.mode is None or not self.consumers:
            self.mode = mode
            self.allow_out_of_order = bool(meta is not None and meta.allow_out_of_order_delivery)
            self.selector = new_selector(mode)
        elif mode != self.mode:
            raise ConsumerBusy(
                f"Key_Shared subscription {self.subscription.name} is in "
                f"{wire.KeySharedMode.Name(self.mode)} mode, not {wire.KeySharedMode.Name(mode)}"
            )
        join_selector(self.selector, consumer, meta)
        super().add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.selector is not None:
            self.selector.remove(consumer)
        super().remove_consumer(consumer)

    def on_acknowledged(self, positions) -> None:
        positions = list(positions)
        super().on_acknowledged(positions)
        # An ack can end a hash's draining: try again.
        if positions:
            self.schedule()

    # -- bookkeeping ----------------------------------------------------------------------
    def _record_delivery(self, consumer: Consumer, item: DispatchEntry) -> None:
        super()._record_delivery(consumer, item)
        key_hash = self._hash_of(item)
        self._entry_hash[item.position] = key_hash
        holders = self._holders[key_hash]
        holders[id(consumer)] = holders.get(id(consumer), 0) + 1

    def _forget_delivery(self, position: Position) -> None:
        holder = self.owner.get(position)
        key_hash = self._entry_hash.pop(position, None)
        if holder is not None and key_hash is not None:
            holders = self._holders.get(key_hash)
            if holders is not None:
                left = holders.get(id(holder), 0) - 1
                if left > 0:
                    holders[id(holder)] = left
                else:
                    holders.pop(id(holder), None)
                    if not holders:
                        del self._holders[key_hash]
        super()._forget_delivery(position)

    @staticmethod
    def _hash_of(item: DispatchEntry) -> int:
        return sticky_key_hash(sticky_key(item.metadata))

    # -- reading and assignment -------------------------------------------------------------
    def _read(self, max_messages: int) -> list[DispatchEntry]:
        # Unlike Shared, held-back entries must not stop other keys: read new ones as well.
        entries = self._read_replay(max_messages) if self.replay else []
        if len(self.replay) + len(entries) < MAX_HELD_BACK and len(entries) < self.max_read_batch:
            entries += self.read_from_cursor(max_messages)
        return entries

    def _draining(self, key_hash: int, target: Consumer) -> bool:
        holders = self._holders.get(key_hash)
        return bool(holders) and any(cid != id(target) for cid in holders)

    def _assign(self, entries, ready):
        budget = {id(c): c.permits for c in ready}
        batches: dict[int, tuple[Consumer, list[DispatchEntry]]] = {}
        leftovers: list[DispatchEntry] = []
        held: set[int] = set()
        for item in entries:
            key_hash = self._hash_of(item)
            target = self.selector.select(key_hash) if self.selector is not None else None
            blocked = (
                target is None
                or key_hash in held
                or budget.get(id(target), 0) <= 0
                or (not self.allow_out_of_order and self._draining(key_hash, target))
            )
            if blocked:
                held.add(key_hash)
                leftovers.append(item)
                continue
            budget[id(target)] -= item.num_messages
            batches.setdefault(id(target), (target, []))[1].append(item)
        return list(batches.values()), leftovers
