"""Entries waiting to be sent again, in publish order."""

from __future__ import annotations

import bisect
from collections.abc import Callable

from magnetar.broker.dispatchers.routes import Route
from magnetar.storage.position import Position


class ReplayQueue:
    """Positions to send again, kept sorted so replays go out in publish order.

    A position may carry the ``Route`` it was dispatched by (the chunked message it belongs
    to, its key hash), so ``take`` can pass over what cannot go out now without reading it,
    and hold back what must stay behind it.
    """

    def __init__(self) -> None:
        self._sorted: list[Position] = []
        self._members: set[Position] = set()
        self._routes: dict[Position, Route] = {}

    def __len__(self) -> int:
        return len(self._sorted)

    def add(self, position: Position, route: Route | None = None) -> None:
        if position not in self._members:
            self._members.add(position)
            bisect.insort(self._sorted, position)
        if route is not None and route.tags:
            self._routes[position] = route

    def discard(self, position: Position) -> None:
        if position in self._members:
            self._members.remove(position)
            self._routes.pop(position, None)
            del self._sorted[bisect.bisect_left(self._sorted, position)]

    def pop_first(self, n: int) -> list[Position]:
        taken, self._sorted = self._sorted[:n], self._sorted[n:]
        self._members.difference_update(taken)
        if self._routes:
            for position in taken:
                self._routes.pop(position, None)
        return taken

    def take(
        self,
        n: int,
        waits: Callable[[Route, set[str | int]], bool],
        routes_taken: dict[Position, Route] | None = None,
    ) -> tuple[list[Position], set[str | int], bool]:
        """Pop up to ``n`` positions in order, passing over those whose route ``waits`` (given the
        tags of the positions passed over before it, which it must not overtake).

        Returns the positions taken, the tags of those passed over, and whether every position
        was looked at (False: ``n`` were taken before the end). The routes of the positions taken
        go to ``routes_taken`` (to ``add`` them back if they cannot be read now).
        """
        routes = self._routes
        order = self._sorted
        taken: list[Position] = []
        kept: list[Position] = []
        held: set[str | int] = set()
        i = 0
        while i < len(order) and len(taken) < n:
            position = order[i]
            i += 1
            route = routes.get(position)
            if route is not None and waits(route, held):
                held.update(route.tags)
                kept.append(position)
            else:
                taken.append(position)
        exhausted = i == len(order)
        self._sorted = kept + order[i:]
        self._members.difference_update(taken)
        if routes:
            for position in taken:
                route = routes.pop(position, None)
                if route is not None and routes_taken is not None:
                    routes_taken[position] = route
        return taken, held, exhausted

    def discard_up_to(self, position: Position) -> None:
        """Forget every position up to ``position`` (it was acknowledged cumulatively)."""
        cut = bisect.bisect_right(self._sorted, position)
        if cut:
            gone = self._sorted[:cut]
            self._members.difference_update(gone)
            if self._routes:
                for p in gone:
                    self._routes.pop(p, None)
            del self._sorted[:cut]

    def clear(self) -> None:
        self._sorted.clear()
        self._members.clear()
        self._routes.clear()
