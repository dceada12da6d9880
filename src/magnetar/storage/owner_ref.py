"""A part's link back to what it belongs to, held weakly.

A managed ledger owns its cursors, its reader and its damage log, and they call it back. Strong
links both ways made every managed ledger a reference cycle, which only the collector's full
passes free: with the broker's collector tuned for throughput those come seldom, so the topics an
idle sweep unloads stayed in memory (issue 40: 100,000 topics, 1.5-2.1 GB, most of them
unloaded). With the link back weak, a closed managed ledger goes as soon as its owner lets it go.
A part used after its owner is gone raises ``StorageClosedError`` (or the error it was given: the
broker's subscriptions and dispatchers hold their topic the same way).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from types import MethodType
from typing import Generic, ParamSpec, TypeVar, cast

from magnetar.storage.errors import StorageClosedError

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


class OwnerRef(Generic[T]):
    """Call it for the owner; once it is gone, ``error("<kind> <name> is closed")`` (the name is
    kept as given, not formatted, until then: a topic holds several of these)."""

    __slots__ = ("_error", "_kind", "_name", "_ref")

    def __init__(
        self, owner: T, kind: str, name: object, error: Callable[[str], Exception] = StorageClosedError
    ) -> None:
        self._ref = weakref.ref(owner)
        self._kind = kind
        self._name = name
        self._error = error

    def __call__(self) -> T:
        owner = self._ref()
        if owner is None:
            raise self._error(f"{self._kind} {self._name} is closed")
        return owner


class WeakCall(Generic[P, R]):
    """A bound ``method`` called through a weak reference to its object (``kind`` and ``name`` say
    what it was in the error once it is gone). Lighter than ``weakref.WeakMethod`` (no callback
    closure, and the plain weak reference is shared with the owner's others): a managed ledger
    holds four."""

    __slots__ = ("_error", "_func", "_kind", "_name", "_ref")

    def __init__(
        self,
        method: Callable[P, R],
        kind: str,
        name: object,
        error: Callable[[str], Exception] = StorageClosedError,
    ) -> None:
        bound = cast(MethodType, method)
        self._ref = weakref.ref(bound.__self__)
        self._func = bound.__func__
        self._kind = kind
        self._name = name
        self._error = error

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        owner = self._ref()
        if owner is None:
            raise self._error(f"{self._kind} {self._name} is closed")
        result: R = self._func(owner, *args, **kwargs)
        return result
