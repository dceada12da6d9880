"""A consumer attached to a subscription through one client connection (Pulsar's ``Consumer``).

Dispatchers reach the connection only through the consumer (``writable``, ``write_frames`` ...);
the consumer holds it as a ``TransportCnx``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from magnetar.broker.chunk_watch import ChunkWatch
from magnetar.broker.entries import DispatchEntry
from magnetar.broker.traffic import Traffic
from magnetar.protocol import wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.hot_frames import consumer_id_field, message_header, partition_field
from magnetar.protocol.message_id import to_u64
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic_api import Subscription
    from magnetar.broker.transport_cnx import TransportCnx


class Consumer:
    """Holds the flow-control permits and, for shared dispatch, the messages awaiting ack.

    Slotted: one broker holds 100K of them (broadcast subscriptions).
    """

    __slots__ = (
        "_told_end_of_topic",
        "chunk_watch",
        "closed",
        "cnx",
        "consumer_id",
        "id_field",
        "key_shared_meta",
        "name",
        "partition_field",
        "pending_acks",
        "permits",
        "priority_level",
        "read_compacted",
        "subscription",
        "traffic",
        "wants_entry_metadata",
    )

    #: Dispatchers may write it MESSAGE frames they built (``write_frames``); a consumer of
    #: another protocol's connection (MQTT) sends entries its own way (``send_own_way``).
    takes_frames: ClassVar[bool] = True
    #: A broadcast consumer that starts at the end of the topic, not at the subscription's
    #: mark-delete position (an MQTT subscriber gets what is published after it subscribed).
    joins_at_tail: ClassVar[bool] = False

    def __init__(
        self,
        cnx: TransportCnx,
        subscription: Subscription[Consumer],
        consumer_id: int,
        name: str,
        priority_level: int = 0,
        key_shared_meta: wire.KeySharedMeta | None = None,
    ) -> None:
        self.cnx = cnx
        self.subscription = subscription
        self.consumer_id = consumer_id
        self.name = name
        self.priority_level = priority_level
        self.key_shared_meta = key_shared_meta
        #: Messages (not entries) the client is ready to receive.
        self.permits = 0
        #: readCompacted (Exclusive and Failover only): the compacted view up to its horizon first.
        self.read_compacted = False
        #: Entries sent and not yet acknowledged: position -> message count (shared dispatchers).
        self.pending_acks: dict[Position, int] = {}
        self.closed = False
        self._told_end_of_topic = False
        #: Messages and bytes dispatched to this consumer (its ``_in`` fields stay zero).
        self.traffic = Traffic()
        #: Its id as encoded in a MESSAGE command, for dispatchers that build frames themselves.
        self.id_field = consumer_id_field(consumer_id)
        #: Its topic's partition index as encoded in every MESSAGE's message id (Pulsar's
        #: ``Consumer.partitionIdx``); empty for a topic that is no partition.
        self.partition_field = partition_field(subscription.topic.partition_index)
        #: Its client asked for broker entry metadata (at CONNECT, so before any consumer: it
        #: stays as it is; kept here, read once per entry sent).
        self.wants_entry_metadata = cnx.wants_entry_metadata
        #: Its client keeps partial chunked messages across reconnects: what it may hold, and
        #: what it must be sent again first (``chunk_watch``); None for other clients.
        self.chunk_watch: ChunkWatch | None = None

    @property
    def writable(self) -> bool:
        """It takes entries from its dispatcher now (not while a chunked message of its own is
        queued to go again: ``send_queued``)."""
        return not self.closed and self.cnx.writable and not self.has_queued

    @property
    def has_queued(self) -> bool:
        return self.chunk_watch is not None and self.chunk_watch.queued

    def send_queued(self, redelivery_counts: dict[Position, int]) -> None:
        """Send a slice of what is queued, if its connection takes it and it has permits."""
        if not self.closed and self.cnx.writable and self.permits > 0:
            self.send_entries([], redelivery_counts)

    def forget_queued(self) -> None:
        """What it had queued is sent again by its dispatcher (a rewind, a redelivery of all)."""
        if self.chunk_watch is not None:
            self.chunk_watch.forget_queued()

    def leave_chunk_watch(self, keep: bool) -> None:
        """Stop watching its chunked messages; ``keep`` when its client may come back holding them
        (it did not close the consumer itself)."""
        watch, self.chunk_watch = self.chunk_watch, None
        if watch is not None:
            watch.leave(keep)

    @property
    def connection_lost(self) -> bool:
        """Its connection is closed (lost, or the broker stopping), not the consumer alone."""
        return self.cnx.closed

    @property
    def address(self) -> str:
        """The client's address, ``host:port``."""
        return self.cnx.remote

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        """MESSAGE frames built by a dispatcher (``broadcast_send``), written in this loop pass."""
        self.cnx.write_many(frames)

    def send_own_way(self, entries: list[DispatchEntry]) -> tuple[int, int]:
        """For a consumer that takes no frames: send ``entries``, charge its permits and count its
        own traffic; the messages and bytes sent (its dispatcher counts them for the
        subscription and topic). It may leave uncharged what it is done with at once (MQTT's
        QoS 0): its dispatcher then goes on sending while it has permits, with no FLOW to wait for."""
        raise NotImplementedError

    def notify_active_consumer_change(self, is_active: bool) -> None:
        """Tell a Failover consumer whether it is now the one receiving."""
        self.cnx.send_active_consumer_change(self.consumer_id, is_active)

    def send_entries(
        self,
        entries: list[DispatchEntry],
        redelivery_counts: dict[Position, int],
        ack_sets: Callable[[Position], list[int] | None] | None = None,
    ) -> None:
        """Write one MESSAGE per entry (as its chunk watch has them go, if any) and charge its
        messages to the permits.

        ``ack_sets`` gives a batch's messages already acknowledged (the subscription cursor's
        record by default; a broadcast consumer's own).
        """
        if self.chunk_watch is not None:
            entries = self.chunk_watch.through(entries, max(self.permits, 1))
            if not entries:
                return
        with_meta = self.wants_entry_metadata
        cursor = self.subscription.cursor
        if ack_sets is None and cursor is not None:
            ack_sets = cursor.batch_ack_set
        partition = self.partition_field
        frames: list[bytes | memoryview] = []
        messages = size = 0
        for item in entries:
            position = item.position
            ack_set = ack_sets(position) if item.is_batch and ack_sets is not None else None
            payload = item.payload_for(with_meta)
            frames.append(
                message_header(
                    self.consumer_id,
                    to_u64(position.ledger_id),
                    to_u64(position.entry_id),
                    redelivery_counts.get(position, 0),
                    ack_set,
                    len(payload),
                    partition,
                )
            )
            frames.append(payload)
            messages += item.num_messages
            size += len(payload)
        self.permits -= messages
        subscription = self.subscription
        for traffic in (self.traffic, subscription.traffic, subscription.topic.traffic):
            traffic.messages_out += messages
            traffic.bytes_out += size
        self.cnx.write_many(frames)

    def reached_end_of_topic(self) -> None:
        """Tell the client, once, that its terminated topic has nothing more for it."""
        if not self.closed and not self._told_end_of_topic:
            self._told_end_of_topic = True
            self.cnx.send_command(wrap(wire.CommandReachedEndOfTopic(consumer_id=self.consumer_id)))

    def close_by_broker(self) -> None:
        """Tell the client to drop this consumer; it will look the topic up and subscribe again."""
        if not self.closed:
            self.cnx.send_close_consumer(self.consumer_id)

    def disconnect(self) -> None:
        """Close this consumer from the broker's side and remove it from its subscription: the
        client is told (``close_by_broker``), its late commands are ignored, and it may
        subscribe again."""
        self.close_by_broker()
        self.cnx.forget_consumer(self.consumer_id)
        self.subscription.remove_consumer(self)

    def __repr__(self) -> str:
        return f"Consumer({self.name!r}, id={self.consumer_id}, permits={self.permits})"
