"""A persistent topic: one managed ledger, its producers and its subscriptions.

The topic keeps the publish path and the state it updates; it composes the rest:
topic_state.py (the durable snapshot and its recovery), producer_access.py (access modes),
topic_subscriptions.py (opening subscriptions), topic_backlog.py (backlog quotas, expiry),
store_waiters.py (``terminate`` waiting for the adds before it), message_deduplication.py
(sequence ids per producer and recent chunks: what is not stored twice).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from magnetar.broker import backlog_quota, descriptors, loop_pass, topic_backlog, topic_state
from magnetar.broker.chunk_contexts import ChunkContexts
from magnetar.broker.chunk_watch import keeps_partial_chunks
from magnetar.broker.compacted_topic import COMPACTION_SUBSCRIPTION, CompactedTopic
from magnetar.broker.consumer import Consumer
from magnetar.broker.entries import RecentEntries
from magnetar.broker.entry_metadata import EntryMetadataInterceptor, IndexInterceptor, load_interceptors
from magnetar.broker.entry_search import EntryReader, message_count
from magnetar.broker.errors import BrokerError, NotAllowed, SubscriptionNotFound
from magnetar.broker.message_deduplication import MessageDeduplication, SequenceKey, sequence_key
from magnetar.broker.producer import DUPLICATE, Producer
from magnetar.broker.producer_access import ProducerAccess
from magnetar.broker.replication import ReplicatorLink, cursor_name, remote_of_cursor
from magnetar.broker.seek import last_message_position, position_for_message_id, position_for_time
from magnetar.broker.store_waiters import StoreWaiters
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.broker.subscription import PersistentSubscription
from magnetar.broker.subscription_type import SubscriptionType
from magnetar.broker.topic_api import PublishCallback
from magnetar.broker.topic_state import keep_newest as _keep_newest
from magnetar.broker.topic_subscriptions import SubscriptionOpener
from magnetar.broker.traffic import Traffic
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.entry import prepend_entry_metadata, stored_form
from magnetar.protocol.headers import parse_metadata
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.errors import ManagedLedgerFencedError, StorageFullError
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.namespaces import NamespacePolicies

log = logging.getLogger(__name__)

SubType = wire.CommandSubscribe.SubType
#: Set (durably) once the topic is terminated.
_TERMINATED_KEY = "terminated"


class PersistentTopic:
    def __init__(
        self,
        name: TopicName,
        ml: ManagedLedger,
        config: BrokerConfig,
        policies: Callable[[], NamespacePolicies] | None = None,
        interceptors: Sequence[Callable[[], EntryMetadataInterceptor]] | None = None,
    ) -> None:
        """``interceptors`` make the topic's broker entry metadata interceptors (start-up loads
        them once, ``startup.BrokerSetup``); None: loaded by the names in ``config``."""
        self.name = name
        #: The namespace's current policies (None: broker settings only).
        self.policies = policies
        self.ml = ml
        self.config = config
        self.partition_index = name.partition_index
        self.producers: dict[tuple[int, int], Producer] = {}
        self.subscriptions: dict[str, PersistentSubscription] = {}
        self.traffic = Traffic()
        if interceptors is None:
            self.interceptors = load_interceptors(config.broker_entry_metadata_interceptors)
        else:
            self.interceptors = [make() for make in interceptors]
        self._index = next((i for i in self.interceptors if isinstance(i, IndexInterceptor)), None)
        #: Producer access modes: the exclusive holder, WaitForExclusive producers in line, the epoch.
        self._access = ProducerAccess(name)
        #: Sealed by ``terminate``: no message is accepted any more (survives restarts).
        self.terminated = ml.get_property(_TERMINATED_KEY) is not None
        self._notify_scheduled = False
        self._passes: loop_pass.PassScheduler | None = None
        #: ``terminate`` calls waiting until the adds up to a position are stored.
        self._store_waiters = StoreWaiters(ml)
        #: Parsed facts of the last 1024 entries published, so dispatch at the tail skips a re-parse.
        self.recent_entries = RecentEntries()
        self._opener = SubscriptionOpener(self, self.subscriptions)
        stored_chunks = StoredChunks()
        recovered = topic_state.recover(ml, stored_chunks, self.interceptors)
        #: Sequence ids per producer and recent chunks: what is not stored twice.
        self.deduplication = MessageDeduplication(
            partial(_deduplication_enabled, config, policies), recovered.producer_sequences, stored_chunks
        )
        #: What official C++ consumers may still hold of chunked messages (kept across restarts).
        self.chunk_contexts = ChunkContexts(ml)
        #: The newest index and broker timestamp stored (what the snapshot records).
        self._stored = recovered.stored
        #: Last position whose durable callback ran: what the sequence snapshot covers.
        self._last_published = recovered.last_published
        self._sequences_dirty = recovered.dirty
        #: Geo-replication: a durable cursor per remote cluster (not a subscription), and the
        #: replicators attached to them (magnetar.replication), by remote cluster name.
        self.replication_cursors: dict[str, ManagedCursor] = {}
        self.replicators: dict[str, ReplicatorLink] = {}
        #: Topic compaction: the compacted view and the compactor's runs (its cursor is no subscription).
        self.compaction = CompactedTopic(
            ml, config.test_compaction_pause_at, config.compaction_yield_interval_ms / 1000
        )
        #: Offloaded entries a dispatcher could not wait for are fetched: read again (tiered storage).
        #: Weakly: the managed ledger is the topic's, and a bound method would make the two a cycle.
        ml.on_offloaded_data = partial(_wake_if_loaded, weakref.ref(self))
        for name_of_cursor, cursor in ml.cursors().items():
            remote = remote_of_cursor(name_of_cursor)
            if name_of_cursor == COMPACTION_SUBSCRIPTION:
                continue
            if remote is not None:
                self.replication_cursors[remote] = cursor
            else:
                self.subscriptions[name_of_cursor] = PersistentSubscription(
                    self, name_of_cursor, cursor, durable=True
                )

    @property
    def index_enabled(self) -> bool:
        """True when the index interceptor is on (index look-ups need it)."""
        return self._index is not None

    @property
    def topic_epoch(self) -> int:
        """Goes up each time a producer takes exclusive access."""
        return self._access.epoch

    # -- producers --------------------------------------------------------------------------
    def add_producer(self, producer: Producer) -> bool:
        """Attach a producer under its access mode; False when it must wait for exclusive access
        (WaitForExclusive), in which case ``on_ready`` is called once it has it."""
        if self.terminated:
            raise BrokerError(f"Topic {self.name} is terminated", wire.TopicTerminatedError)
        blocked = self.exceeded_backlog_quota()
        if blocked is not None and blocked[1].policy != backlog_quota.EVICTION:
            kind, quota = blocked
            code = (
                wire.ProducerBlockedQuotaExceededError
                if quota.policy == backlog_quota.HOLD
                else wire.ProducerBlockedQuotaExceededException
            )
            raise BrokerError(
                f"Cannot create producer on topic {self.name}: backlog quota exceeded ({kind})", code
            )
        # A full disk, or files that cannot be opened again (out of descriptors, a file gone):
        # refused as a quota is, the one refusal on which the official clients fail their pending
        # sends at once (and retry creating the producer later) rather than resend them until their
        # send timeout.
        try:
            self.ml.check_writable()
        except (StorageFullError, ManagedLedgerFencedError) as exc:
            raise BrokerError(
                f"Cannot create producer on topic {self.name}: storage refuses writes: {exc}",
                wire.ProducerBlockedQuotaExceededException,
            ) from exc
        except OSError as exc:
            if descriptors.is_exhaustion(exc):
                descriptors.EXHAUSTION.refused("write", f"a producer on {self.name}: {exc}")
                reason = f"the broker is out of file descriptors ({exc})"
            else:
                log.error("%s: a producer is refused: the topic's files cannot be opened: %s", self.name, exc)
                reason = f"its files cannot be opened ({exc})"
            raise BrokerError(
                f"Cannot create producer on topic {self.name}: {reason}",
                wire.ProducerBlockedQuotaExceededException,
            ) from exc
        return self._access.admit(self.producers, producer)

    def remove_producer(self, producer: Producer) -> None:
        self._access.release(self.producers, producer)
        if not self.producers:
            # An idle topic (100,000 of them) keeps no table for producers gone, nor the facts of
            # its last entries: a dispatch that does not find them parses the entry again.
            self.producers.clear()
            self.recent_entries.clear()

    def last_sequence_id(self, producer_name: str) -> int:
        return self.deduplication.last_sequence_id(producer_name)

    def publish(
        self,
        producer: Producer,
        send: wire.CommandSend,
        headers_and_payload: memoryview,
        callback: PublishCallback,
        metadata: wire.MessageMetadata | None = None,
    ) -> None:
        """Store the producer's bytes (with broker entry metadata in front) and call back once durable.

        A chunk of a chunked message that is stored already (or being stored) is not stored
        again: it is answered with that copy's position (``StoredChunks``). With deduplication
        on, a send whose sequence id the topic has taken already is answered as a duplicate
        (``MessageDeduplication``, which says which sequence id a message counts under).
        """
        if metadata is None:
            metadata = _metadata_or_none(headers_and_payload)
        chunk = chunk_ref(metadata)
        chunks = self.deduplication.stored_chunks
        if chunk is not None and metadata is not None and chunks.answer_resend(metadata, chunk, callback):
            return
        key = sequence_key(producer.name, max(send.sequence_id, send.highest_sequence_id), metadata, chunk)
        if self.deduplication.is_duplicate(key, producer.deduplicated):
            callback(DUPLICATE, None)
            return
        storing = (
            (chunks.storing(metadata, chunk), chunk) if chunk is not None and metadata is not None else None
        )
        if metadata is not None:
            num_messages = message_count(metadata)  # what consumers count: the batch's own size
        else:
            num_messages = send.num_messages if send.HasField("num_messages") else 1
        previous_index = self._index.last_index if self._index is not None else None
        data, meta = self._entry_data(headers_and_payload, num_messages)
        producer_offset = len(data) - len(headers_and_payload)

        def on_durable(position: Position | None, exc: Exception | None) -> None:
            if exc is None and position is not None:
                self._entry_stored(position, producer_offset, metadata, meta, key)
            else:
                self._entry_not_stored(key)
            callback(position, exc)
            if storing is not None:
                chunks.stored(*storing, position, exc)
            if exc is None:
                self._notify_subscriptions()
            if self._store_waiters:
                self._release_store_waiters(exc is not None)

        try:
            self.ml.add_entry(data, on_durable)
        except Exception as exc:
            if self._index is not None and previous_index is not None:  # nothing stored: index not used up
                self._index.last_index = previous_index
            self.deduplication.not_pushed(key)
            if storing is not None:
                chunks.stored(*storing, None, exc)
            raise

    def _entry_data(
        self, headers_and_payload: memoryview, num_messages: int
    ) -> tuple[bytes | memoryview, wire.BrokerEntryMetadata | None]:
        """What is stored: PIP 70's broker entry metadata in front (when any interceptor is on) of
        the producer's bytes, which stay untouched."""
        if not self.interceptors:
            return stored_form(headers_and_payload), None
        meta = wire.BrokerEntryMetadata()
        for interceptor in self.interceptors:
            interceptor.intercept(meta, num_messages)
        return prepend_entry_metadata(meta, headers_and_payload), meta

    def _entry_stored(
        self,
        position: Position,
        producer_offset: int,
        metadata: wire.MessageMetadata | None,
        meta: wire.BrokerEntryMetadata | None,
        key: SequenceKey,
    ) -> None:
        if metadata is not None:
            self.recent_entries.remember(position, producer_offset, metadata)
        # max: completions of different group-commit rounds may arrive out of order
        self._last_published = max(self._last_published, position)
        if meta is not None:
            _keep_newest(self._stored, meta)
        self._sequences_dirty = True
        self.deduplication.persisted(key)

    def _entry_not_stored(self, key: SequenceKey) -> None:
        self.deduplication.not_persisted(key)
        if self._index is not None:
            # A failed fsync drops every unconfirmed entry: the index goes on from the last stored.
            self._index.last_index = self._stored.index if self._stored.HasField("index") else -1

    def deduplication_enabled(self) -> bool:
        return _deduplication_enabled(self.config, self.policies)

    def _notify_subscriptions(self) -> None:
        # Many receipts arrive together after one fsync: wake the dispatchers once for all.
        if not self._notify_scheduled:
            self._notify_scheduled = True
            if self._passes is None:
                self._passes = loop_pass.current()
            self._passes.defer(loop_pass.WAKE, self._wake_dispatchers)

    def _wake_dispatchers(self) -> None:
        self._notify_scheduled = False
        for subscription in list(self.subscriptions.values()):
            subscription.notify_new_entries()
        for replicator in list(self.replicators.values()):
            replicator.notify_new_entries()

    # -- geo-replication ----------------------------------------------------------------------
    def open_replication_cursors(self, remotes: list[str]) -> list[str]:
        """Make sure a durable ``pulsar.repl.{remote}`` cursor exists for each of ``remotes`` (a new
        one starts at the end, as Pulsar's: what is published from now on is replicated); the
        remotes whose cursor is new."""
        new = []
        for remote in remotes:
            if remote not in self.replication_cursors:
                self.replication_cursors[remote] = self.ml.open_cursor(cursor_name(remote), "latest")
                new.append(remote)
        return new

    def drop_replication_cursor(self, remote: str) -> None:
        """Forget replication to ``remote`` (no longer among the topic's clusters): its cursor goes,
        and with it what it held back from trimming."""
        self.replicators.pop(remote, None)
        if self.replication_cursors.pop(remote, None) is not None:
            self.ml.delete_cursor(cursor_name(remote))

    def _release_store_waiters(self, failed: bool) -> None:
        self._store_waiters.release(failed)

    # -- subscriptions ----------------------------------------------------------------------
    def subscribe(
        self, consumer_factory: Callable[[PersistentSubscription], Consumer], cmd: wire.CommandSubscribe
    ) -> Consumer:
        return self._opener.subscribe(consumer_factory, cmd)

    def watch_chunks(self, consumer: Consumer, client_version: str) -> None:
        """Watch the chunked messages sent to a consumer whose client keeps partial ones across
        reconnects (``chunk_watch``); broadcast subscriptions send their own way."""
        subscription = self.subscriptions.get(consumer.subscription.name)
        if (
            subscription is consumer.subscription
            and subscription.kind is not SubscriptionType.Broadcast
            and keeps_partial_chunks(client_version)
        ):
            self.chunk_contexts.attach(consumer, subscription, self.deduplication.stored_chunks)

    async def prepare_subscription(self, name: str, initial: str, executor) -> None:
        """Create the durable subscription ``name`` with its cursor stored on ``executor``'s
        threads, then in use on the loop; no-op if it exists."""
        await self._opener.prepare(name, initial, executor)

    def create_subscription(self, name: str, start: Position) -> None:
        """A durable subscription with no consumer yet, whose first entry to deliver is ``start``."""
        self._opener.create_at(name, start)

    def subscription(self, name: str) -> PersistentSubscription:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise SubscriptionNotFound(f"Subscription {name} not found on topic {self.name}")
        return subscription

    def drop_subscription(self, name: str, force: bool = False) -> None:
        """Delete a subscription and its cursor; with consumers connected only when ``force``ed
        (they are disconnected first, as by Pulsar's ``unsubscribe --force``)."""
        subscription = self.subscription(name)
        if subscription.consumers:
            if not force:
                raise NotAllowed(f"Subscription {name} has active connected consumers")
            subscription.disconnect_all()
        subscription.close()
        self.delete_subscription(name)

    def remove_subscription(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            subscription.close()

    def delete_subscription(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None and subscription.durable:
            self.ml.delete_cursor(name)

    async def terminate(self) -> Position:
        """Seal the topic (Pulsar's terminate): sends and new producers are refused from now on
        with TopicTerminatedError, and each consumer is told when it has acknowledged everything.

        As in Pulsar, it answers once every send accepted before it has been stored (or has
        failed): the position of the last message stored, never one that may yet be lost.
        """
        if not self.terminated:
            self.terminated = True
            self.ml.set_property(_TERMINATED_KEY, "true")
        await self._store_waiters.stored_up_to(self.ml.last_added)
        for subscription in list(self.subscriptions.values()):
            subscription.check_end_of_topic()
        return self.ml.last_confirmed

    # -- backlog quotas and expiry (topic_backlog.py) ----------------------------------------
    def backlog_quotas(self) -> dict[str, backlog_quota.BacklogQuota]:
        return topic_backlog.quotas(self)

    def exceeded_backlog_quota(self) -> tuple[str, backlog_quota.BacklogQuota] | None:
        """The backlog quota this topic is past, with its kind; None if within all (or none set)."""
        return topic_backlog.exceeded(self)

    def enforce_backlog_quota(self) -> str | None:
        """Apply the policy of the quota this topic is past (see backlog_quota.py); its kind, or None."""
        return topic_backlog.enforce(self)

    def expire_older_than(
        self,
        seconds: float,
        subscriptions: list[PersistentSubscription] | None = None,
        expired: Callable[[list[str]], None] | None = None,
    ) -> None:
        """Acknowledge, for ``subscriptions`` (default: all), the messages older than ``seconds`` by
        broker time: at once, or once the offloaded entries the search reads are fetched;
        ``expired`` is told the names of those that had any."""
        topic_backlog.expire_older_than(self, seconds, subscriptions, expired)

    async def expired_older_than(
        self, seconds: float, subscriptions: list[PersistentSubscription] | None = None
    ) -> list[str]:
        """``expire_older_than``, awaited (the admin API): the names of those that had any."""
        return await topic_backlog.expired_older_than(self, seconds, subscriptions)

    # -- queries ----------------------------------------------------------------------------
    def last_message_position(
        self, read_compacted: bool = False, read: EntryReader | None = None
    ) -> tuple[Position, int]:
        """The last stored entry and the batch index of its last message (-1 if not a batch). For a
        readCompacted consumer, while the compacted view covers the whole topic (its horizon is the
        last entry, or the topic holds none), the view's last message instead, as Pulsar answers.
        ``read`` reads the last entry (offloaded_reads.PatientReader: without waiting for the store)."""
        horizon = self.compaction.horizon
        if read_compacted and horizon is not None:
            last = self.ml.last_confirmed
            if last.entry_id < 0 or last <= horizon:
                return self.compaction.last_message()
        return last_message_position(self.ml, read)

    def seek_position(self, msg_id: wire.MessageIdData) -> Position:
        return position_for_message_id(self.ml, msg_id)

    def find_position_by_time(self, timestamp_ms: int, read: EntryReader | None = None) -> Position:
        """First entry at or after ``timestamp_ms`` by broker time (else publish time); O(log n) reads."""
        return position_for_time(self.ml, timestamp_ms, read)

    # -- lifecycle --------------------------------------------------------------------------
    def flush(self) -> None:
        """Persist cursors (with what dispatchers keep durable: broadcast consumers' places), what
        consumers may hold of chunked messages, and the state snapshot (producer sequence ids,
        newest index and broker time)."""
        self._save_dispatcher_state()
        self._persist()

    def _save_dispatcher_state(self) -> None:
        for subscription in self.subscriptions.values():
            if subscription.dispatcher is not None:
                subscription.dispatcher.save_state()

    def _persist(self) -> None:
        self.ml.flush_cursors()
        if self._sequences_dirty:
            self._sequences_dirty = False
            dedup = self.deduplication
            saved = topic_state.snapshot(
                self._last_published, dedup.highest_persisted, self._stored, dedup.stored_chunks
            )
            self.ml.set_property(topic_state.SEQUENCES_KEY, saved)
        self.chunk_contexts.save()

    def trim(
        self, retention_time_seconds: float | None = None, retention_size_bytes: int | None = None
    ) -> list[int]:
        """Delete consumed ledgers (``ManagedLedger.trim``), after persisting the state snapshot.

        Recovery replays the entries after the snapshot; once they are deleted only the
        snapshot can tell the last index, so it must cover them first.
        """
        self.flush()
        return self.ml.trim(retention_time_seconds, retention_size_bytes)

    @property
    def busy(self) -> bool:
        """Work under way that closing now would cut short: adds not yet stored, durable
        subscriptions being created, a terminate waiting for its adds."""
        ml = self.ml
        return (
            ml.last_added != ml.last_confirmed
            or self._opener.preparing
            or bool(self._store_waiters)
            or self.compaction.running
        )

    def close(self) -> None:
        self.detach()
        self.close_storage()

    def detach(self) -> None:
        """The loop's half of closing: the subscriptions closed, what their dispatchers keep durable
        (broadcast consumers' places) handed to storage."""
        for subscription in self.subscriptions.values():
            subscription.close()
        self._save_dispatcher_state()

    def close_storage(self) -> None:
        """Storage's half of closing, once the loop has let the topic go (``detach``): cursors and
        the state snapshot persisted, the managed ledger closed. Fsyncs and commits, so an idle
        topic's unload runs it on an open thread (topic_loader.py)."""
        self._persist()
        self.compaction.close()
        self.ml.close()


def _wake_if_loaded(topic: weakref.ref[PersistentTopic]) -> None:
    """Offloaded entries were fetched: the topic's dispatchers read again (none once it is gone)."""
    loaded = topic()
    if loaded is not None:
        loaded._notify_subscriptions()


def _deduplication_enabled(config: BrokerConfig, policies: Callable[[], NamespacePolicies] | None) -> bool:
    """The namespace's deduplication policy, else the broker's setting (a function of its own, not a
    method: the topic's deduplication calls it, and a bound method would make the two a cycle)."""
    policy = policies().deduplication_enabled if policies is not None else None
    return config.deduplication_enabled if policy is None else policy


def _metadata_or_none(headers_and_payload: memoryview) -> wire.MessageMetadata | None:
    try:
        return parse_metadata(headers_and_payload)[0]
    except ProtocolError:
        return None
