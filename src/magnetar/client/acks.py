"""Acknowledgement bookkeeping of one consumer (no I/O): batches, grouping, redelivery timers.

* ``BatchAcks`` remembers which messages of each batch entry are still unacknowledged; the
  entry is acknowledged once all are (or, with batch-index acks, each index as an ack set).
* ``AckGrouper`` gathers acknowledgements for up to ``ack_group_time`` and turns them into
  as few ACK commands as possible (one individual ACK carries many ids).
* ``RedeliveryTimer`` holds ids to redeliver at a given time: negative acks, chunks to
  redeliver later, and messages past the unacked timeout.
"""

from __future__ import annotations

from magnetar.client.message import MessageId
from magnetar.protocol import pulsar_wire_pb2 as wire

_EntryKey = tuple[int, int, int]  # (partition, ledger, entry)


def entry_key(msg_id: MessageId) -> _EntryKey:
    return (msg_id.partition(), msg_id.ledger_id(), msg_id.entry_id())


def ack_set_words(unacked: set[int], size: int) -> list[int]:
    """Java BitSet layout of ``unacked`` (bit i set = message i still unacknowledged), as int64 words."""
    words = [0] * ((size + 63) // 64)
    for index in unacked:
        words[index // 64] |= 1 << (index % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def ack_set_bits(words: list[int]) -> set[int] | None:
    """Indexes still unacknowledged according to an ack set (None: no ack set, all are)."""
    if not words:
        return None
    bits = set()
    for word_no, word in enumerate(words):
        word &= (1 << 64) - 1
        while word:
            low = word & -word
            bits.add(word_no * 64 + low.bit_length() - 1)
            word ^= low
    return bits


class BatchAcks:
    """Unacknowledged indexes of the batch entries handed to the application."""

    def __init__(self) -> None:
        self._unacked: dict[_EntryKey, set[int]] = {}
        self._sizes: dict[_EntryKey, int] = {}

    def delivered(self, msg_id: MessageId, batch_size: int, unacked: set[int] | None = None) -> None:
        key = entry_key(msg_id)
        if key not in self._unacked:
            self._sizes[key] = batch_size
            self._unacked[key] = set(range(batch_size)) if unacked is None else set(unacked)

    def ack(self, msg_id: MessageId) -> bool:
        """Mark one batch message acknowledged; True when its whole entry now is."""
        key = entry_key(msg_id)
        unacked = self._unacked.get(key)
        if unacked is None:
            size = msg_id.batch_size()
            if size <= 1:
                return True
            unacked = self._unacked[key] = set(range(size))
            self._sizes[key] = size
        unacked.discard(msg_id.batch_index())
        if unacked:
            return False
        self.forget(msg_id)
        return True

    def remaining(self, msg_id: MessageId) -> tuple[set[int], int] | None:
        key = entry_key(msg_id)
        if key not in self._unacked:
            return None
        return self._unacked[key], self._sizes[key]

    def is_last_unacked_up_to(self, msg_id: MessageId) -> bool:
        """For a cumulative ack: whether ``msg_id`` is the last message of its batch."""
        size = msg_id.batch_size() or (self._sizes.get(entry_key(msg_id), 0))
        return size <= 0 or msg_id.batch_index() >= size - 1

    def forget(self, msg_id: MessageId) -> None:
        key = entry_key(msg_id)
        self._unacked.pop(key, None)
        self._sizes.pop(key, None)

    def forget_up_to(self, msg_id: MessageId) -> None:
        for key in [k for k in self._unacked if (k[1], k[2]) <= (msg_id.ledger_id(), msg_id.entry_id())]:
            self._unacked.pop(key, None)
            self._sizes.pop(key, None)

    def clear(self) -> None:
        self._unacked.clear()
        self._sizes.clear()


class AckGrouper:
    """Acknowledgements waiting to be sent."""

    def __init__(self, max_individual: int = 1000) -> None:
        self.max_individual = max_individual
        self._individual: dict[MessageId, wire.MessageIdData] = {}
        self._cumulative: MessageId | None = None

    def __bool__(self) -> bool:
        return bool(self._individual) or self._cumulative is not None

    def add_individual(self, msg_id: MessageId, ack_set: list[int] | None = None) -> bool:
        """Queue an individual ack (an entry, or a batch index with its ack set); True when full."""
        data = msg_id.to_proto(with_batch=False)
        if ack_set is not None:
            data.ack_set.extend(ack_set)
        self._individual[msg_id.entry_position()] = data
        return len(self._individual) >= self.max_individual

    def add_cumulative(self, msg_id: MessageId) -> None:
        if self._cumulative is None or msg_id > self._cumulative:
            self._cumulative = msg_id

    def is_duplicate(self, msg_id: MessageId) -> bool:
        """Whether ``msg_id`` is already acknowledged by something waiting here."""
        if self._cumulative is not None and msg_id.entry_position() <= self._cumulative.entry_position():
            return True
        data = self._individual.get(msg_id.entry_position())
        return data is not None and not data.ack_set

    def take(self, consumer_id: int) -> list[wire.CommandAck]:
        """The ACK commands for everything queued; the grouper starts over."""
        out = []
        if self._cumulative is not None:
            ack = wire.CommandAck(consumer_id=consumer_id, ack_type=wire.CommandAck.Cumulative)
            ack.message_id.append(self._cumulative.to_proto(with_batch=False))
            out.append(ack)
        if self._individual:
            ack = wire.CommandAck(consumer_id=consumer_id, ack_type=wire.CommandAck.Individual)
            ack.message_id.extend(self._individual.values())
            out.append(ack)
        self.clear()
        return out

    def clear(self) -> None:
        self._individual = {}
        self._cumulative = None


class RedeliveryTimer:
    """Entry ids due for redelivery at given times (monotonic seconds)."""

    def __init__(self) -> None:
        self._due: dict[MessageId, float] = {}

    def __len__(self) -> int:
        return len(self._due)

    def add(self, msg_id: MessageId, when: float) -> None:
        key = msg_id.entry_position()
        self._due[key] = min(when, self._due.get(key, when))

    def remove(self, msg_id: MessageId) -> None:
        self._due.pop(msg_id.entry_position(), None)

    def remove_up_to(self, msg_id: MessageId) -> None:
        limit = msg_id.entry_position()
        self._due = {k: v for k, v in self._due.items() if k > limit}

    def take_due(self, now: float) -> list[MessageId]:
        due = [k for k, when in self._due.items() if when <= now]
        for key in due:
            del self._due[key]
        return sorted(due)

    def clear(self) -> None:
        self._due.clear()
