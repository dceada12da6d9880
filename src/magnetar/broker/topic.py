"""A persistent topic: one managed ledger, its producers and its subscriptions."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker import backlog_quota, descriptors, loop_pass
from magnetar.broker.consumer import Consumer
from magnetar.broker.dispatchers.broadcast import wants_broadcast
from magnetar.broker.entries import RecentEntries
from magnetar.broker.entry_metadata import IndexInterceptor, load_interceptors
from magnetar.broker.entry_search import EntryReader, EntrySpace, entry_time, first_true, message_count
from magnetar.broker.errors import BrokerError, NotAllowed, SubscriptionNotFound
from magnetar.broker.ids import is_earliest, is_latest, position_of
from magnetar.broker.namespaces import AlreadyExists
from magnetar.broker.producer import DUPLICATE, Producer
from magnetar.broker.seek import position_for_message_id, position_for_time
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.broker.subscription import Subscription
from magnetar.broker.traffic import Traffic
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.entry import prepend_entry_metadata, split_entry_metadata, stored_form
from magnetar.protocol.headers import parse_metadata
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.entry import EntryData
from magnetar.storage.errors import ManagedLedgerFencedError, StorageFullError
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.namespaces import NamespacePolicies

log = logging.getLogger(__name__)

SubType = wire.CommandSubscribe.SubType
_SEQUENCES_KEY = "producer_sequences"
#: Set (durably) once the topic is terminated.
_TERMINATED_KEY = "terminated"

PublishCallback = Callable[[Position | None, Exception | None], None]


class PersistentTopic:
    def __init__(
        self,
        name: TopicName,
        ml: ManagedLedger,
        config: BrokerConfig,
        policies: Callable[[], NamespacePolicies] | None = None,
    ) -> None:
        self.name = name
        #: The namespace's current policies (None: broker settings only).
        self.policies = policies
        self.ml = ml
        self.config = config
        self.partition_index = name.partition_index
        self.producers: dict[tuple[int, int], Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.traffic = Traffic()
        self.interceptors = load_interceptors(config.broker_entry_metadata_interceptors)
        self._index = next((i for i in self.interceptors if isinstance(i, IndexInterceptor)), None)
        #: Highest sequence id stored per producer name (survives restarts).
        self.producer_sequences: dict[str, int] = {}
        #: Chunks of recent chunked messages, so a chunk sent again is not stored again.
        self.stored_chunks = StoredChunks()
        #: Producer access modes: the exclusive holder, and WaitForExclusive producers in line.
        self._exclusive: Producer | None = None
        self._waiting: list[Producer] = []
        self.topic_epoch = 0
        #: Sealed by ``terminate``: no message is accepted any more (survives restarts).
        self.terminated = ml.get_property(_TERMINATED_KEY) is not None
        #: Highest sequence id accepted per producer, stored or still in flight (deduplication).
        self._pushed_sequences: dict[str, int] = {}
        self._sequences_dirty = False
        #: Last position whose durable callback ran: what the sequence snapshot covers.
        self._last_published = Position(-1, -1)
        self._notify_scheduled = False
        self._passes: loop_pass.PassScheduler | None = None
        #: ``terminate`` calls waiting until the adds up to a position are stored.
        self._store_waiters: list[tuple[Position, asyncio.Future[None]]] = []
        #: Parsed facts of the last 1024 entries published, so dispatch at the tail skips a re-parse.
        self.recent_entries = RecentEntries()
        #: Durable subscriptions being created on an open thread, by name (``prepare_subscription``).
        self._preparing: dict[str, asyncio.Future] = {}
        self._recover_state()
        for cursor_name, cursor in ml.cursors().items():
            self.subscriptions[cursor_name] = Subscription(self, cursor_name, cursor, durable=True)

    # -- recovery ---------------------------------------------------------------------------
    def _recover_state(self) -> None:
        """Rebuild producer sequence ids and the newest stored index and broker timestamp.

        The snapshot (written by ``flush``: periodically, before every trim and on close) holds
        them as of a position; the entries stored after it (at most a flush interval's worth
        after a kill -9, every entry when there is no snapshot) are replayed, so the index goes on
        after the last one stored: no gap, no repeat. Entries the replay finds make the state
        dirty, so the next flush records them before a trim can delete them.
        """
        start = None
        stored = wire.BrokerEntryMetadata()
        raw = self.ml.get_property(_SEQUENCES_KEY)
        if raw:
            snapshot = json.loads(raw)
            self.producer_sequences = {k: int(v) for k, v in snapshot["sequences"].items()}
            if snapshot.get("index") is not None:
                stored.index = int(snapshot["index"])
            if snapshot.get("broker_timestamp") is not None:
                stored.broker_timestamp = int(snapshot["broker_timestamp"])
            self.stored_chunks.restore(snapshot.get("chunks", []))
            start = self.ml.next_position(Position(*snapshot["position"]))
        if start is None:
            start = self.ml.first_position()
        last = self.ml.last_confirmed
        while start is not None and start.entry_id >= 0 and start <= last:
            entries = self.ml.read_entries(start, 1000)
            if not entries:
                break
            for entry in entries:
                self._replay_entry(entry.data, entry.position, stored)
            self._last_published = entries[-1].position
            self._sequences_dirty = True
            start = self.ml.next_position(entries[-1].position)
        self._stored = stored
        for interceptor in self.interceptors:
            recover = getattr(interceptor, "recover", None)
            if recover is not None:
                recover(stored)

    def _replay_entry(self, data: EntryData, position: Position, stored: wire.BrokerEntryMetadata) -> None:
        try:
            meta, producer_bytes = split_entry_metadata(data)
        except ProtocolError:
            return
        if meta is not None:
            _keep_newest(stored, meta)
        try:
            metadata, _ = parse_metadata(producer_bytes)
        except ProtocolError:
            return
        highest = max(metadata.sequence_id, metadata.highest_sequence_id)
        chunk = chunk_ref(metadata)
        if chunk is not None:
            self.stored_chunks.recover(metadata, chunk, position)
        name = metadata.producer_name
        if (chunk is None or chunk.last) and highest > self.producer_sequences.get(name, -1):
            self.producer_sequences[name] = highest

    @property
    def index_enabled(self) -> bool:
        """True when the index interceptor is on (index look-ups need it)."""
        return self._index is not None

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
        try:  # a full disk: refused as a quota is (the client fails its pending sends, retries later)
            self.ml.check_writable()
        except (StorageFullError, ManagedLedgerFencedError) as exc:
            raise BrokerError(
                f"Cannot create producer on topic {self.name}: storage refuses writes: {exc}",
                wire.ProducerBlockedQuotaExceededException,
            ) from exc
        for existing in self.producers.values():
            if existing.name == producer.name:
                raise BrokerError(
                    f"Producer with name '{producer.name}' is already connected to topic",
                    wire.ProducerBusy,
                )
        mode = producer.access_mode
        holder = self._exclusive
        if mode == wire.ExclusiveWithFencing:
            for other in list(self.producers.values()):
                other.fence()
            self._take_exclusive(producer)
        elif holder is not None or (mode != wire.Shared and self.producers):
            if mode == wire.WaitForExclusive:
                self._waiting.append(producer)
                return False
            if holder is not None:
                raise BrokerError(
                    f"Topic {self.name} has an exclusive producer ({holder.name})", wire.ProducerFenced
                )
            raise BrokerError(
                f"Topic {self.name} has other producers: exclusive access refused", wire.ProducerBusy
            )
        elif mode != wire.Shared:
            self._take_exclusive(producer)
        self.producers[(id(producer.cnx), producer.producer_id)] = producer
        return True

    def _take_exclusive(self, producer: Producer) -> None:
        self._exclusive = producer
        self.topic_epoch += 1

    def remove_producer(self, producer: Producer) -> None:
        if producer in self._waiting:
            self._waiting.remove(producer)
            return
        self.producers.pop((id(producer.cnx), producer.producer_id), None)
        if producer is self._exclusive:
            self._exclusive = None
        if self._exclusive is None and not self.producers and self._waiting:
            waiter = self._waiting.pop(0)
            self._take_exclusive(waiter)
            self.producers[(id(waiter.cnx), waiter.producer_id)] = waiter
            waiter.on_ready()

    def last_sequence_id(self, producer_name: str) -> int:
        return self.producer_sequences.get(producer_name, -1)

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
        again: it is answered with that copy's position (``stored_chunks``).

        With deduplication on, a send whose sequence id is not above the producer's highest
        one stored or in flight is not stored again: it is answered as a duplicate. Every chunk
        of a chunked message carries the message's sequence id, so (as in Pulsar's
        MessageDeduplication) only the last chunk records it; the others are only checked.
        """
        if metadata is None:
            try:
                metadata, _ = parse_metadata(headers_and_payload)
            except ProtocolError:
                metadata = None
        chunk = chunk_ref(metadata)
        if chunk is not None and self.stored_chunks.answer_resend(metadata, chunk, callback):
            return
        highest = max(send.sequence_id, send.highest_sequence_id)
        records_sequence = chunk is None or chunk.last
        if self.deduplication_enabled():
            if highest <= self._pushed_sequences.get(producer.name, self.last_sequence_id(producer.name)):
                callback(DUPLICATE, None)
                return
            if records_sequence:
                self._pushed_sequences[producer.name] = highest
        chunk_record = self.stored_chunks.storing(metadata, chunk) if chunk is not None else None
        if metadata is not None:
            num_messages = message_count(metadata)  # what consumers count: the batch's own size
        else:
            num_messages = send.num_messages if send.HasField("num_messages") else 1
        meta = None
        previous_index = self._index.last_index if self._index is not None else None
        if self.interceptors:  # PIP 70: metadata in front, producer's bytes untouched
            meta = wire.BrokerEntryMetadata()
            for interceptor in self.interceptors:
                interceptor.intercept(meta, num_messages)
            data = prepend_entry_metadata(meta, headers_and_payload)
        else:
            data = stored_form(headers_and_payload)
        producer_offset = len(data) - len(headers_and_payload)

        def on_durable(position: Position | None, exc: Exception | None) -> None:
            if exc is None and position is not None:
                if metadata is not None:
                    self.recent_entries.remember(position, producer_offset, metadata)
                # max: completions of different group-commit rounds may arrive out of order
                self._last_published = max(self._last_published, position)
                if meta is not None:
                    _keep_newest(self._stored, meta)
                self._sequences_dirty = True
                if records_sequence and highest > self.producer_sequences.get(producer.name, -1):
                    self.producer_sequences[producer.name] = highest
            else:
                if producer.name in self._pushed_sequences:
                    # Not stored: a resend of this sequence id must not count as a duplicate.
                    self._pushed_sequences[producer.name] = self.last_sequence_id(producer.name)
                if self._index is not None:
                    # A failed fsync drops every unconfirmed entry: the index goes on from the last stored.
                    self._index.last_index = self._stored.index if self._stored.HasField("index") else -1
            callback(position, exc)
            if chunk_record is not None:
                self.stored_chunks.stored(chunk_record, chunk, position, exc)
            if exc is None:
                self._notify_subscriptions()
            if self._store_waiters:
                self._release_store_waiters(exc is not None)

        try:
            self.ml.add_entry(data, on_durable)
        except Exception as exc:
            if previous_index is not None:  # nothing was stored: the index is not used up
                self._index.last_index = previous_index
            self._pushed_sequences.pop(producer.name, None)
            if chunk_record is not None:
                self.stored_chunks.stored(chunk_record, chunk, None, exc)
            raise

    def deduplication_enabled(self) -> bool:
        policy = self.policies().deduplication_enabled if self.policies is not None else None
        return self.config.deduplication_enabled if policy is None else policy

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

    # -- subscriptions ----------------------------------------------------------------------
    def subscribe(
        self, consumer_factory: Callable[[Subscription], Consumer], cmd: wire.CommandSubscribe
    ) -> Consumer:
        name = cmd.subscription
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = self._create_subscription(cmd)
        consumer = consumer_factory(subscription)
        try:
            subscription.add_consumer(consumer, cmd.sub_type, broadcast=wants_broadcast(cmd))
        except Exception:
            if not subscription.durable and not subscription.consumers:
                self.remove_subscription(name)
            raise
        return consumer

    async def prepare_subscription(self, name: str, initial: str, executor) -> None:
        """Create the durable subscription ``name`` with its cursor stored on ``executor``'s
        threads (files, fsync, commit), then in use on the loop; no-op if it exists."""
        if name in self.subscriptions or not name:
            return
        preparing = self._preparing.get(name)
        if preparing is None:
            loop = asyncio.get_running_loop()
            preparing = loop.run_in_executor(executor, self._prepare_cursor, name, initial)
            self._preparing[name] = preparing
            preparing.add_done_callback(lambda done: self._prepared(name, done))
        await asyncio.shield(preparing)

    def _prepare_cursor(self, name: str, initial: str) -> ManagedCursor:
        """On an open thread: the new durable cursor, stored; PersistenceError when its files
        cannot be opened (the descriptors left are the reserve, EMFILE ...)."""
        what = f"{name} on {self.name}"
        try:
            descriptors.check_reserve("subscription", what)
            return self.ml.prepare_cursor(name, initial)
        except OSError as exc:
            raise descriptors.storage_error("subscription", what, exc) from None

    def _prepared(self, name: str, done: asyncio.Future) -> None:
        del self._preparing[name]
        if done.cancelled() or done.exception() is not None:
            return
        try:
            cursor = self.ml.adopt_cursor(done.result())
        except Exception:
            log.exception("%s: subscription %s could not be put in use", self.name, name)
            return
        if name not in self.subscriptions:
            self.subscriptions[name] = Subscription(self, name, cursor, durable=True)

    def _create_subscription(self, cmd: wire.CommandSubscribe) -> Subscription:
        name = cmd.subscription
        if not name:
            raise NotAllowed("subscription name is empty")
        if cmd.durable:
            initial = "earliest" if cmd.initial_position == wire.CommandSubscribe.Earliest else "latest"
            try:
                descriptors.check_reserve("subscription", f"{name} on {self.name}")
                cursor = self.ml.open_cursor(name, initial_position=initial)
            except OSError as exc:
                raise descriptors.storage_error("subscription", f"{name} on {self.name}", exc) from None
        else:
            cursor = self.ml.new_non_durable_cursor(self._reader_start(cmd))
        subscription = Subscription(self, name, cursor, durable=cmd.durable)
        self.subscriptions[name] = subscription
        return subscription

    def _reader_start(self, cmd: wire.CommandSubscribe) -> Position:
        """First entry a non-durable subscription reads.

        A given message id starts at its own entry whether or not it is inclusive: the
        client drops what precedes its start id (inside a batch, too).
        """
        if cmd.HasField("start_message_id"):
            msg_id = cmd.start_message_id
            if is_latest(msg_id):
                return self.ml.next_position(self.ml.last_confirmed)
            if not is_earliest(msg_id):
                return position_of(msg_id)
        elif cmd.initial_position == wire.CommandSubscribe.Latest:
            return self.ml.next_position(self.ml.last_confirmed)
        return self.ml.first_position() or self.ml.next_position(self.ml.last_confirmed)

    async def terminate(self) -> Position:
        """Seal the topic (Pulsar's terminate): sends and new producers are refused from now on
        with TopicTerminatedError, and each consumer is told when it has acknowledged everything.

        As in Pulsar, it answers once every send accepted before it has been stored (or has
        failed): the position of the last message stored, never one that may yet be lost.
        """
        if not self.terminated:
            self.terminated = True
            self.ml.set_property(_TERMINATED_KEY, "true")
        await self._stored_up_to(self.ml.last_added)
        for subscription in list(self.subscriptions.values()):
            subscription.check_end_of_topic()
        return self.ml.last_confirmed

    async def _stored_up_to(self, position: Position) -> None:
        """Wait until the adds up to ``position`` are durable, or the managed ledger has failed."""
        if self.ml.last_confirmed >= position or self.ml.fenced:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._store_waiters.append((position, waiter))
        await waiter

    def _release_store_waiters(self, failed: bool) -> None:
        """After an add completed: wake the waiters it satisfies (all of them when it failed: the
        managed ledger is fenced and what it confirmed is final)."""
        confirmed = self.ml.last_confirmed
        waiting = []
        for position, waiter in self._store_waiters:
            if failed or position <= confirmed:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                waiting.append((position, waiter))
        self._store_waiters = waiting

    # -- backlog quotas ---------------------------------------------------------------------
    def backlog_quotas(self) -> dict[str, backlog_quota.BacklogQuota]:
        policies = self.policies() if self.policies is not None else None
        namespace_map = policies.backlog_quota_map if policies is not None else None
        return backlog_quota.effective_quotas(namespace_map, self.config.default_backlog_quotas())

    def _slowest_position(self) -> Position | None:
        """The mark-delete position of the subscription furthest behind (None: no subscription)."""
        return min((sub.cursor.mark_delete_position for sub in self.subscriptions.values()), default=None)

    def backlog_size(self) -> int:
        """Estimated bytes from the slowest subscription on (what a size quota limits)."""
        slowest = self._slowest_position()
        return 0 if slowest is None else self.ml.size_after(slowest)

    def oldest_backlog_age(self, now_ms: int) -> float | None:
        """Seconds since the oldest unacknowledged message was stored (broker time), if any."""
        slowest = self._slowest_position()
        if slowest is None:
            return None
        oldest = self.ml.next_position(slowest)
        if not self.ml.has_entry(oldest):
            return None
        return (now_ms - entry_time(self.ml.read_entry(oldest).data)) / 1000

    def exceeded_backlog_quota(self) -> tuple[str, backlog_quota.BacklogQuota] | None:
        """The backlog quota this topic is past, with its kind; None if within all (or none set)."""
        quotas = self.backlog_quotas()
        size, age = quotas[backlog_quota.SIZE], quotas[backlog_quota.AGE]
        if size.limit_size < 0 and age.limit_time < 0:
            return None
        oldest = self.oldest_backlog_age(int(time.time() * 1000)) if age.limit_time >= 0 else None
        return backlog_quota.exceeded(quotas, self.backlog_size(), oldest)

    def enforce_backlog_quota(self) -> str | None:
        """Apply the policy of the quota this topic is past (see backlog_quota.py); its kind, or None."""
        blocked = self.exceeded_backlog_quota()
        if blocked is None:
            return None
        kind, quota = blocked
        if quota.policy != backlog_quota.EVICTION:
            for producer in list(self.producers.values()):
                producer.close_by_broker()
        elif kind == backlog_quota.SIZE:
            self._evict_to_size(quota.limit_size)
        else:
            self.expire_older_than(quota.limit_time)
        return kind

    def _evict_to_size(self, limit_bytes: int) -> None:
        """Acknowledge, for the subscriptions furthest behind, the oldest entries until at most
        ``limit_bytes`` are left after them."""
        space = EntrySpace(self.ml)
        keep_from = first_true(space.size, lambda i: self.ml.size_after(space.position(i)) <= limit_bytes)
        if keep_from == space.size:
            return
        start = self.ml.next_position(space.position(keep_from))
        for subscription in self.subscriptions.values():
            subscription.expire_before(start)

    def expire_older_than(self, seconds: float, subscriptions: list[Subscription] | None = None) -> list[str]:
        """Acknowledge, for ``subscriptions`` (default: all), the messages older than ``seconds`` by
        broker time (message TTL, expire-messages, age quota eviction); the names of those that
        had any."""
        start = self.find_position_by_time(int(time.time() * 1000 - seconds * 1000))
        targets = list(self.subscriptions.values()) if subscriptions is None else subscriptions
        return [subscription.name for subscription in targets if subscription.expire_before(start)]

    # -- subscriptions by the admin API ------------------------------------------------------
    def create_subscription(self, name: str, start: Position) -> None:
        """A durable subscription with no consumer yet, whose first entry to deliver is ``start``."""
        if not name:
            raise NotAllowed("subscription name is empty")
        if name in self.subscriptions:
            raise AlreadyExists(f"Subscription {name} already exists for topic {self.name}")
        cursor = self.ml.open_cursor(name, initial_position="latest")
        cursor.reset(start)
        self.subscriptions[name] = Subscription(self, name, cursor, durable=True)

    def subscription(self, name: str) -> Subscription:
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

    # -- queries ----------------------------------------------------------------------------
    def last_message_position(self) -> tuple[Position, int]:
        """The last stored entry and the batch index of its last message (-1 if not a batch)."""
        last = self.ml.last_confirmed
        if last.entry_id < 0:
            return last, -1
        try:
            _, producer_bytes = split_entry_metadata(self.ml.read_entry(last).data)
            metadata, _ = parse_metadata(producer_bytes)
        except ProtocolError:
            return last, -1
        if metadata.HasField("num_messages_in_batch"):
            return last, metadata.num_messages_in_batch - 1
        return last, -1

    def seek_position(self, msg_id: wire.MessageIdData) -> Position:
        return position_for_message_id(self.ml, msg_id)

    def find_position_by_time(self, timestamp_ms: int, read: EntryReader | None = None) -> Position:
        """First entry at or after ``timestamp_ms`` by broker time (else publish time); O(log n) reads."""
        return position_for_time(self.ml, timestamp_ms, read)

    # -- lifecycle --------------------------------------------------------------------------
    def flush(self) -> None:
        """Persist cursors and the state snapshot (producer sequence ids, newest index and broker time)."""
        self.ml.flush_cursors()
        if self._sequences_dirty:
            self._sequences_dirty = False
            last = self._last_published
            snapshot: dict = {
                "position": [last.ledger_id, last.entry_id],
                "sequences": self.producer_sequences,
            }
            if self._stored.HasField("index"):
                snapshot["index"] = self._stored.index
            if self._stored.HasField("broker_timestamp"):
                snapshot["broker_timestamp"] = self._stored.broker_timestamp
            if self.stored_chunks.chunks:
                snapshot["chunks"] = self.stored_chunks.snapshot()
            self.ml.set_property(_SEQUENCES_KEY, json.dumps(snapshot))

    def trim(
        self, retention_time_seconds: float | None = None, retention_size_bytes: int | None = None
    ) -> list[int]:
        """Delete consumed ledgers (``ManagedLedger.trim``), after persisting the state snapshot.

        Recovery replays the entries after the snapshot; once they are deleted only the
        snapshot can tell the last index, so it must cover them first.
        """
        self.flush()
        return self.ml.trim(retention_time_seconds, retention_size_bytes)

    def close(self) -> None:
        for subscription in self.subscriptions.values():
            subscription.close()
        self.flush()
        self.ml.close()


def _keep_newest(stored: wire.BrokerEntryMetadata, meta: wire.BrokerEntryMetadata) -> None:
    """Record ``meta``'s index and broker timestamp in ``stored`` when they are newer."""
    if meta.HasField("index") and (not stored.HasField("index") or meta.index > stored.index):
        stored.index = meta.index
    if meta.HasField("broker_timestamp") and meta.broker_timestamp > stored.broker_timestamp:
        stored.broker_timestamp = meta.broker_timestamp
