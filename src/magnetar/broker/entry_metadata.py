"""Broker entry metadata interceptors (PIP 70): what the broker writes in front of each entry.

Built in:

- ``broker_timestamp``: the broker's clock in ms, never going backwards within a topic
  partition (a clock stepped back repeats the last value), so seek by time can binary search.
- ``index``: index of the entry's last message, continuous per topic partition: the first
  message gets 0 and each entry adds its message count.

Others are loaded by dotted class path (``"mypkg.mod.MyInterceptor"``). An interceptor is a
class whose constructor takes no argument (one instance per topic partition, so it may keep
state) with::

    def intercept(self, meta: BrokerEntryMetadata, num_messages: int) -> None
        # fill fields of ``meta`` for an entry of ``num_messages`` messages

and optionally::

    def recover(self, last: BrokerEntryMetadata) -> None
        # called once when the topic loads, before any intercept: the newest broker_timestamp
        # and index stored on the topic (fields unset when no entry carried them)

Interceptors run in configured order on the broker's event loop, once per entry, in the order
the entries are stored.
"""

from __future__ import annotations

import importlib
import time
from typing import Protocol

from magnetar.protocol import wire


class EntryMetadataInterceptor(Protocol):
    def intercept(self, meta: wire.BrokerEntryMetadata, num_messages: int) -> None: ...


class BrokerTimestampInterceptor:
    """Broker time in ms, monotonic per topic partition."""

    __slots__ = ("last_timestamp",)  # one per topic: no instance dict (issue 40)

    def __init__(self) -> None:
        self.last_timestamp = 0

    def intercept(self, meta: wire.BrokerEntryMetadata, num_messages: int) -> None:
        now = time.time_ns() // 1_000_000
        if now < self.last_timestamp:
            now = self.last_timestamp
        self.last_timestamp = now
        meta.broker_timestamp = now

    def recover(self, last: wire.BrokerEntryMetadata) -> None:
        if last.HasField("broker_timestamp"):
            self.last_timestamp = last.broker_timestamp


class IndexInterceptor:
    """Continuous message index: ``last_index`` is the index of the last message stored (or -1)."""

    __slots__ = ("last_index",)  # one per topic: no instance dict (issue 40)

    def __init__(self) -> None:
        self.last_index = -1

    def intercept(self, meta: wire.BrokerEntryMetadata, num_messages: int) -> None:
        self.last_index += num_messages
        meta.index = self.last_index

    def recover(self, last: wire.BrokerEntryMetadata) -> None:
        self.last_index = last.index if last.HasField("index") else -1


BUILT_IN: dict[str, type[EntryMetadataInterceptor]] = {
    "broker_timestamp": BrokerTimestampInterceptor,
    "index": IndexInterceptor,
}


def load_interceptor_class(name: str) -> type[EntryMetadataInterceptor]:
    if name in BUILT_IN:
        return BUILT_IN[name]
    module_name, _, cls_name = name.rpartition(".")
    if not module_name:
        raise ValueError(
            f"unknown broker entry metadata interceptor {name!r} "
            f"(built in: {', '.join(BUILT_IN)}; others by dotted class path)"
        )
    try:
        cls = getattr(importlib.import_module(module_name), cls_name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load broker entry metadata interceptor {name!r}: {exc}") from None
    if not callable(getattr(cls, "intercept", None)):
        raise ValueError(f"broker entry metadata interceptor {name!r} has no intercept(meta, num_messages)")
    return cls


def load_interceptors(names: list[str]) -> list[EntryMetadataInterceptor]:
    """A fresh interceptor per name (their state is per topic partition, so call this per topic)."""
    return [load_interceptor_class(name)() for name in names]
