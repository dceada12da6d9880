"""Broker entry metadata interceptors (PIP 70): what the broker writes in front of each entry.

Built in: ``broker_timestamp`` (broker clock, ms) and ``index`` (index of the entry's last
message, continuous per topic partition). Others are loaded by dotted class path; an
interceptor is any object with ``intercept(meta, num_messages) -> None`` that fills fields
of a ``BrokerEntryMetadata``.
"""

from __future__ import annotations

import importlib
import time
from typing import Protocol

from magnetar.protocol import wire


class EntryMetadataInterceptor(Protocol):
    def intercept(self, meta: wire.BrokerEntryMetadata, num_messages: int) -> None: ...


class BrokerTimestampInterceptor:
    def intercept(self, meta: wire.BrokerEntryMetadata, num_messages: int) -> None:
        meta.broker_timestamp = time.time_ns() // 1_000_000


class IndexInterceptor:
    """Continuous message index; the topic seeds ``last_index`` when it loads."""

    def __init__(self) -> None:
        self.last_index = -1

    def intercept(self, meta: wire.BrokerEntryMetadata, num_messages: int) -> None:
        self.last_index += num_messages
        meta.index = self.last_index


_BUILT_IN = {"broker_timestamp": BrokerTimestampInterceptor, "index": IndexInterceptor}


def load_interceptors(names: list[str]) -> list[EntryMetadataInterceptor]:
    """A fresh interceptor per name (index state is per topic, so call this per topic)."""
    out = []
    for name in names:
        if name in _BUILT_IN:
            out.append(_BUILT_IN[name]())
            continue
        module_name, _, cls_name = name.rpartition(".")
        if not module_name:
            raise ValueError(f"unknown broker entry metadata interceptor {name!r}")
        out.append(getattr(importlib.import_module(module_name), cls_name)())
    return out
