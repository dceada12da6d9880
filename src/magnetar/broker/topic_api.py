"""Topics and subscriptions as the modules below them see them (Pulsar's ``Topic`` and
``Subscription`` interfaces).

Consumers, producers, dispatchers and the helpers a topic is made of are below the topic and
subscription that hold them, yet call back into them (a consumer leaves its subscription, a
dispatcher reads its topic's ledger). They name their owners through these Protocols, never
through ``PersistentTopic`` or ``PersistentSubscription``, so every import in the broker points
down. ``Topic`` and ``Subscription`` are what both kinds have (``PersistentTopic`` and
``NonPersistentTopic``, ``PersistentSubscription`` and ``NonPersistentSubscription``);
``LedgerTopic`` and ``CursorSubscription`` add what only the persistent ones have, a managed
ledger and a managed cursor.

A Protocol's methods that take a producer or a consumer are generic in its type (``_P``,
``_C``): this module is below ``producer.py`` and ``consumer.py`` and cannot name them. A
subscription's topic takes no producer from its consumers, hence ``Topic[Never]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Never, Protocol, TypeVar

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.entries import RecentEntries
    from magnetar.broker.entry_search import EntryReader
    from magnetar.broker.namespaces import NamespacePolicies
    from magnetar.broker.traffic import Traffic
    from magnetar.protocol import wire
    from magnetar.protocol.topic_name import TopicName
    from magnetar.storage.cursor import ManagedCursor
    from magnetar.storage.entry import Entry
    from magnetar.storage.managed_ledger import ManagedLedger
    from magnetar.storage.position import Position

#: Called once a published message is stored (its position) or refused (the error).
PublishCallback = Callable[["Position | None", "Exception | None"], None]

_P = TypeVar("_P", contravariant=True)
_C = TypeVar("_C", contravariant=True)


class Topic(Protocol[_P]):
    """A topic as its producers (of type ``_P``) and subscriptions see it."""

    @property
    def name(self) -> TopicName: ...

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def traffic(self) -> Traffic: ...

    @property
    def partition_index(self) -> int:
        """Its partition, -1 when it is not one (Failover picks its active consumer by it)."""
        ...

    @property
    def terminated(self) -> bool:
        """Sealed: no message is accepted any more (never, on a non-persistent topic)."""
        ...

    @property
    def topic_epoch(self) -> int: ...

    @property
    def producers(self) -> Mapping[tuple[int, int], ClosedByBroker]:
        """The producers it admitted (not those waiting for exclusive access)."""
        ...

    def last_sequence_id(self, producer_name: str) -> int: ...

    def publish(
        self,
        producer: _P,
        send: wire.CommandSend,
        headers_and_payload: memoryview,
        callback: PublishCallback,
        metadata: wire.MessageMetadata | None = None,
    ) -> None: ...

    def remove_producer(self, producer: _P) -> None: ...


class ClosedByBroker(Protocol):
    """A producer (or consumer) the broker can close; its client reconnects."""

    def close_by_broker(self) -> None: ...


class Subscription(Protocol[_C]):
    """A subscription as its consumers (of type ``_C``) see it; ``cursor`` is None on a
    non-persistent one (nothing is stored, nothing to acknowledge)."""

    @property
    def name(self) -> str: ...

    @property
    def topic(self) -> Topic[Never]: ...

    @property
    def durable(self) -> bool: ...

    @property
    def cursor(self) -> ManagedCursor | None: ...

    @property
    def traffic(self) -> Traffic: ...

    def flow(self, consumer: _C, permits: int) -> None: ...

    def acknowledge(self, ack: wire.CommandAck, consumer: _C | None = None) -> None: ...

    def acknowledge_one(self, consumer: _C, cumulative: bool, ledger_id: int, entry_id: int) -> bool: ...

    def redeliver(self, consumer: _C, msg_ids: list[wire.MessageIdData]) -> None: ...

    def check_end_of_topic(self) -> None: ...

    def on_writable(self, consumer: _C) -> None:
        """The consumer's connection can be written again: dispatch what waited for it."""
        ...

    def unsubscribe(self, consumer: _C) -> None: ...

    def remove_consumer(self, consumer: _C) -> None: ...


class CompactedReads(Protocol):
    """A topic's compacted view as a readCompacted consumer's dispatcher reads it."""

    @property
    def horizon(self) -> Position | None:
        """The last position the view covers (None: never compacted)."""
        ...

    def read_compacted(self, start: Position, max_entries: int, max_bytes: int) -> list[Entry]:
        """The view's entries at or after ``start``, with their original positions."""
        ...

    def earliest(self) -> tuple[Position, bool]:
        """Where a compacted read from the earliest message starts, and whether exactly there (in
        the view, before the topic's first entry)."""
        ...


class LedgerTopic(Topic[Never], Protocol):
    """A persistent topic as its subscriptions, dispatchers and helpers see it: its messages in a
    managed ledger."""

    @property
    def ml(self) -> ManagedLedger: ...

    @property
    def recent_entries(self) -> RecentEntries:
        """Parsed facts of the entries published last (dispatch at the tail skips a re-parse)."""
        ...

    @property
    def policies(self) -> Callable[[], NamespacePolicies] | None: ...

    @property
    def compaction(self) -> CompactedReads: ...

    @property
    def subscriptions(self) -> Mapping[str, CursorSubscription[Never]]: ...

    @property
    def replication_cursors(self) -> Mapping[str, ManagedCursor]: ...

    def find_position_by_time(self, timestamp_ms: int, read: EntryReader | None = None) -> Position: ...

    def remove_subscription(self, name: str) -> None: ...

    def delete_subscription(self, name: str) -> None: ...


class CursorSubscription(Subscription[_C], Protocol[_C]):
    """A persistent subscription as its dispatcher sees it: a managed cursor on its topic's ledger."""

    @property
    def topic(self) -> LedgerTopic: ...

    @property
    def cursor(self) -> ManagedCursor: ...

    @property
    def reset_epoch(self) -> int:
        """How many resets (seeks) of the subscription this broker knows of (the spread's count
        in the shared store; 0 for one broker alone): stored virtual cursors carry it, and those
        stored before the last reset, by any worker, are not resumed from."""
        ...

    def mark_delete(self, position: Position) -> None: ...

    def expire_before(self, position: Position) -> bool: ...
