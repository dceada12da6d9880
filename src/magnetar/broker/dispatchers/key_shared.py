"""Key_Shared: every key goes to one consumer at a time, in order.

Each entry's sticky key hashes into 0..65535 and a selector maps the hash to a consumer
(AUTO_SPLIT: ranges split as consumers join; STICKY: ranges the consumers declare).

Order when consumers come and go ("draining hashes", as Pulsar 4 does): when a hash moves
to another consumer while the previous holder still has unacknowledged entries of that
hash, no entry of that hash is dispatched until those are acknowledged (or given back).
Once an entry of a hash is held back, every later entry of that hash is held back too, so
nothing overtakes. Held-back entries wait in the replay queue, which is served first and in
publish order; entries of hashes that cannot go now are passed over there without being read,
so the other keys go on.

Chunked messages: a message's chunks all go to the consumer its first chunk went to, even
when a consumer joining or leaving moves the key's hash meanwhile (the new holder of the hash
then waits for that message to be acknowledged, as for any entry of a moved hash).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, TypeAlias

from magnetar.broker.dispatchers.routes import Route
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
from magnetar.protocol.chunks import chunk_ref
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.topic_api import CursorSubscription


KeySharedMode: TypeAlias = wire.KeySharedMode.ValueType


def key_shared_mode(meta: wire.KeySharedMeta | None) -> KeySharedMode:
    return meta.key_shared_mode if meta is not None else wire.AUTO_SPLIT


def new_selector(mode: KeySharedMode) -> AutoSplitSelector | StickySelector:
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
    def __init__(self, subscription: CursorSubscription[Consumer], max_read_batch: int = 100) -> None:
        super().__init__(subscription, max_read_batch)
        self.mode: KeySharedMode | None = None
        self.allow_out_of_order = False
        self.selector: AutoSplitSelector | StickySelector | None = None
        #: hash -> {consumer id(): unacknowledged entries of that hash it holds}
        self._holders: dict[int, dict[int, int]] = defaultdict(dict)
        #: The route of whole messages of each key hash (at most 65,536; one object per hash).
        self._key_routes: dict[int, Route] = {}

    def add_consumer(self, consumer: Consumer) -> None:
        meta = consumer.key_shared_meta
        mode = key_shared_mode(meta)
        selector = self.selector
        if self.mode is None or selector is None or not self.consumers:
            self.mode = mode
            self.allow_out_of_order = bool(meta is not None and meta.allow_out_of_order_delivery)
            self.selector = selector = new_selector(mode)
        elif mode != self.mode:
            raise ConsumerBusy(
                f"Key_Shared subscription {self.subscription.name} is in "
                f"{wire.KeySharedMode.Name(self.mode)} mode, not {wire.KeySharedMode.Name(mode)}"
            )
        join_selector(selector, consumer, meta)
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
    def _record_delivery(self, consumer: Consumer, item: DispatchEntry, route: Route) -> None:
        super()._record_delivery(consumer, item, route)
        assert route.key_hash is not None  # every route here has its key's hash (``_route``)
        holders = self._holders[route.key_hash]
        holders[id(consumer)] = holders.get(id(consumer), 0) + 1

    def _forget_delivery(self, position: Position) -> None:
        holder = self.owner.get(position)
        route = self.routes.get(position)
        if holder is not None and route is not None and route.key_hash is not None:
            holders = self._holders.get(route.key_hash)
            if holders is not None:
                left = holders.get(id(holder), 0) - 1
                if left > 0:
                    holders[id(holder)] = left
                else:
                    holders.pop(id(holder), None)
                    if not holders:
                        del self._holders[route.key_hash]
        super()._forget_delivery(position)

    # -- routing --------------------------------------------------------------------------
    def _route(self, item: DispatchEntry) -> Route:
        key_hash = sticky_key_hash(sticky_key(item.metadata))
        chunk = chunk_ref(item.metadata)
        if chunk is not None:
            return Route(chunk, key_hash)
        route = self._key_routes.get(key_hash)
        if route is None:
            route = self._key_routes[key_hash] = Route(None, key_hash)
        return route

    def _blocked(self, route: Route, budget: dict[int, int]) -> bool:
        if route.chunk is not None and self.chunks.owner(route.chunk.uuid) is not None:
            return super()._blocked(route, budget)
        return route.key_hash is not None and self._pick(route, [], budget) is None

    def _pick(self, route: Route, ready: list[Consumer], budget: dict[int, int]) -> Consumer | None:
        """The consumer owning the key's hash, unless it has no permits or the hash is draining."""
        key_hash = route.key_hash
        assert key_hash is not None  # every route here has its key's hash (``_route``)
        target = self.selector.select(key_hash) if self.selector is not None else None
        if target is None or budget.get(id(target), 0) <= 0:
            return None
        if not self.allow_out_of_order and self._draining(key_hash, target):
            return None
        return target

    def _draining(self, key_hash: int, target: Consumer) -> bool:
        holders = self._holders.get(key_hash)
        return holders is not None and any(cid != id(target) for cid in holders)
