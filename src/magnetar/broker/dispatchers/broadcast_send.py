"""The broadcast dispatcher's send path: one entry's MESSAGE frames to many consumers.

Every consumer reading at one position is sent the same entries. What those frames share is
worked out once per entry (``OutgoingEntry``: the encoded message id, with the topic's
partition index when it is a partition, and the payload with and without broker entry
metadata), so each consumer costs only its small MESSAGE command (its consumer id, encoded
once per consumer: ``consumer_id_field``) and two list appends; its connection writes
everything a round gave it with one ``writelines``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.entries import DispatchEntry
from magnetar.protocol.hot_frames import message_header, message_id_field, plain_message_header
from magnetar.protocol.message_id import to_u64

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.dispatchers.virtual_cursor import VirtualCursor


class OutgoingEntry:
    """An entry about to go to many consumers, with what their frames share."""

    __slots__ = ("entry", "is_batch", "message_id", "num_messages", "position", "with_meta", "without_meta")

    def __init__(self, entry: DispatchEntry, partition: bytes) -> None:
        """``partition``: the topic's ``hot_frames.partition_field``."""
        self.entry = entry
        self.position = position = entry.position
        self.num_messages = entry.num_messages
        self.is_batch = entry.is_batch
        self.message_id = message_id_field(to_u64(position.ledger_id), to_u64(position.entry_id), partition)
        self.with_meta = entry.payload_for(True)
        self.without_meta = entry.payload_for(False)


def send(consumer: Consumer, vc: VirtualCursor, outgoing: list[OutgoingEntry]) -> tuple[int, int]:
    """Write ``outgoing`` to ``consumer``, charge its permits, hold the entries as awaiting its
    ack, and count its traffic; the messages and bytes sent (the caller counts them for the
    subscription and topic once per round)."""
    pending = consumer.pending_acks
    if not consumer.takes_frames:  # another protocol's consumer (MQTT) writes the entries its own way
        for item in outgoing:
            pending[item.position] = item.num_messages
        return consumer.send_own_way([item.entry for item in outgoing])
    id_field = consumer.id_field
    with_meta = consumer.wants_entry_metadata
    frames: list[bytes | memoryview] = []
    messages = size = 0
    plain = vc.redelivered is None and vc.partial_batches is None
    for item in outgoing:
        payload = item.with_meta if with_meta else item.without_meta
        if plain:
            frames.append(plain_message_header(id_field, item.message_id, len(payload)))
        else:  # sent before, or a batch partly acknowledged: the rare full header
            position = item.position
            ack_set = vc.batch_ack_set(position) if item.is_batch else None
            frames.append(
                message_header(
                    consumer.consumer_id,
                    to_u64(position.ledger_id),
                    to_u64(position.entry_id),
                    vc.redelivery_count(position),
                    ack_set,
                    len(payload),
                    consumer.partition_field,
                )
            )
        frames.append(payload)
        pending[item.position] = item.num_messages
        messages += item.num_messages
        size += len(payload)
    consumer.permits -= messages
    traffic = consumer.traffic
    traffic.messages_out += messages
    traffic.bytes_out += size
    consumer.write_frames(frames)
    return messages, size
