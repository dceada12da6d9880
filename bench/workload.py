"""Producers, consumers and the correctness tally, over the official ``pulsar-client``.

Every payload carries its sequence number at both ends (8 bytes big-endian each), so the consumer can tell
duplicates, gaps, reordering and truncated or corrupted payloads apart without keeping the payloads.
A message counts as *missing* only if the broker receipted it and it never arrived: that is data loss.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import _pulsar
import pulsar

SEQ = struct.Struct(">Q")
MIN_PAYLOAD = 2 * SEQ.size
RECEIVE_POLL_MS = 200
MAX_SEQ = 1 << 28

# The C++ client's warnings go to this file through its own file logger. A Python logger would cost a
# call into Python (and the GIL) for every message: a 1 KB drain ran at ~14k msg/s with one and ~90k
# without, so the client, not the broker, set the rates.
_client_log: str = os.devnull


def log_client_to(path: Path) -> None:
    global _client_log
    _client_log = str(path)


def make_client(service_url: str, **options: object) -> pulsar.Client:
    """An official client logging to the bench's file; ``options`` as ``pulsar.Client``'s (TLS ...)."""
    logger = pulsar.FileLogger(pulsar.LoggerLevel.Warn, _client_log)
    return pulsar.Client(service_url, operation_timeout_seconds=30, logger=logger, **options)


# -- payloads ------------------------------------------------------------------------------------------------


class Payloads:
    """Payloads of ``size`` bytes: ``[seq][filler][seq]`` (``size`` is at least 16)."""

    def __init__(self, size: int) -> None:
        self.size = max(size, MIN_PAYLOAD)
        self._filler = bytes(i % 251 for i in range(min(self.size - MIN_PAYLOAD, 4096)))
        repeats, rest = divmod(self.size - MIN_PAYLOAD, 4096)
        if repeats:
            self._filler = self._filler * repeats + self._filler[:rest]

    def make(self, seq: int) -> bytes:
        head = SEQ.pack(seq)
        return b"".join((head, self._filler, head))

    def read(self, data: bytes) -> tuple[int, bool]:
        """The payload's sequence number and whether the payload is whole (length and both ends agree)."""
        seq = SEQ.unpack_from(data, 0)[0]
        return seq, len(data) == self.size and data[-SEQ.size :] == data[: SEQ.size]


# -- lean calls into the client ------------------------------------------------------------------------------


Send = Callable[[bytes], object]
SendAsync = Callable[[bytes, Callable], None]


def lean_send(producer: pulsar.Producer) -> tuple[Send, SendAsync]:
    """``send`` and ``send_async`` that build the message with the client's own ``MessageBuilder`` and hand it
    to the C++ producer, as ``pulsar.Producer`` does minus its Python argument checks (which cost as much as
    the rest of a 100-byte send). Falls back to the public methods if the wrapper changes shape."""
    raw = getattr(producer, "_producer", None)
    builder = getattr(_pulsar, "MessageBuilder", None)
    if raw is None or builder is None:
        return producer.send, producer.send_async

    def send(content: bytes) -> object:
        return raw.send(builder().content(content).build())

    def send_async(content: bytes, callback: Callable) -> None:
        raw.send_async(builder().content(content).build(), callback)

    return send, send_async


# -- what the producer learnt --------------------------------------------------------------------------------


@dataclass
class Produced:
    sent: int = 0
    receipted: bytearray = field(
        default_factory=bytearray
    )  # receipted[seq] == 1 once the broker receipted it
    receipts: int = 0
    errors: int = 0
    first_error: str | None = None
    elapsed_s: float = 0.0  # from the first send to the last receipt
    latencies_us: list[float] = field(default_factory=list)  # per sync send


class Producing:
    """Sends ``Payloads`` until a deadline or a count, sync (timing each send) or async with callbacks.

    Async sends go in groups of ``group`` messages and only a group's last message carries a callback. A
    callback is a call from the client's I/O thread into Python that must take the GIL; with one per
    100-byte message the bench process, not the broker, set the batched rates (~20k msg/s, client CPU
    well over a core). The client completes one producer's sends in order (receipts are matched to the
    head of its pending queue, and failures fail the queue from the head), so a group's last receipt
    vouches for the whole group. A failure hidden inside a group that a later receipt covers would show
    as *missing*: loudly, never as a silent success.
    """

    def __init__(
        self, producer: pulsar.Producer, payloads: Payloads, sync: bool, window: int = 1000, group: int = 1
    ) -> None:
        self.producer = producer
        self.payloads = payloads
        self.sync = sync
        self.window = max(1, window)
        self.group = max(1, min(group, self.window))
        self.result = Produced()
        self.done = threading.Event()
        self._lock = threading.Lock()
        self._answered = threading.Condition(self._lock)
        self._settled = 0  # sends whose fate (receipt or error) is known; groups are settled whole
        self._settled_groups: set[int] = set()  # by first sequence number
        self._last_receipt = 0.0
        self.done_at = 0.0

    def run(self, duration_s: float, max_messages: int, receipt_timeout_s: float) -> Produced:
        start = time.monotonic()
        try:
            if self.sync:
                self._send_sync(start + duration_s, max_messages)
            else:
                self._send_async(start + duration_s, max_messages, receipt_timeout_s)
            self.result.elapsed_s = max((self._last_receipt or time.monotonic()) - start, 1e-9)
        finally:
            self.done_at = time.monotonic()
            self.done.set()
        return self.result

    def _send_sync(self, deadline: float, max_messages: int) -> None:
        result, payloads, send = self.result, self.payloads, lean_send(self.producer)[0]
        clock = time.perf_counter
        seq = 0
        while seq < max_messages and time.monotonic() < deadline:
            payload = payloads.make(seq)
            result.receipted.append(0)
            t0 = clock()
            try:
                send(payload)
            except pulsar.Interrupted:  # the client turns a signal during a blocking call into this
                raise KeyboardInterrupt from None
            except pulsar.PulsarException as exc:
                self._record_error(exc)
            else:
                result.latencies_us.append((clock() - t0) * 1e6)
                result.receipted[seq] = 1
                result.receipts += 1
            self._last_receipt = time.monotonic()
            seq += 1
        result.sent = seq

    def _send_async(self, deadline: float, max_messages: int, receipt_timeout_s: float) -> None:
        """Sends whole groups through a window of ``window`` unsettled messages, so no client call ever
        blocks for long.

        The client's own queue is never full (its blocking mode can wait forever on a broker that refuses
        a message and is sent it again on every reconnection).
        """
        result, payloads, group = self.result, self.payloads, self.group
        send = lean_send(self.producer)[1]
        seq = 0
        while seq < max_messages and time.monotonic() < deadline:
            first, last = seq, min(seq + group, max_messages) - 1
            if not self._wait_settled(last + 1 - self.window, receipt_timeout_s):
                self._record_error(f"no receipt for {receipt_timeout_s:.0f} s with the window full")
                break
            result.receipted.extend(bytes(last + 1 - first))
            for seq in range(first, last + 1):
                try:
                    send(payloads.make(seq), self._callback(first, last) if seq == last else None)
                except pulsar.PulsarException as exc:
                    self._settle(first, last, exc)
                    break
            seq = last + 1
        with self._lock:
            result.sent = seq
        if not self._wait_settled(seq, receipt_timeout_s):
            with self._lock:
                unsettled = seq - self._settled
            self._record_error(f"{unsettled} sends without a receipt or an error")

    def _wait_settled(self, count: int, timeout_s: float) -> bool:
        """Until at least ``count`` sends are settled; False on timeout."""
        with self._answered:
            return self._answered.wait_for(lambda: self._settled >= count, timeout_s)

    def _callback(self, first: int, last: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def done(res: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
            self._settle(first, last, None if res == pulsar.Result.Ok else res)

        return done

    def _settle(self, first: int, last: int, error: object | None) -> None:
        """The group ``first..last`` is receipted (``error`` None) or failed, each of its sends counted."""
        count = last + 1 - first
        with self._answered:
            if first in self._settled_groups:  # a send call failed and the group's callback came too
                return
            self._settled_groups.add(first)
            if error is None:
                self.result.receipted[first : last + 1] = b"\x01" * count
                self.result.receipts += count
                self._last_receipt = time.monotonic()
            else:
                self.result.errors += count
                if self.result.first_error is None:
                    self.result.first_error = str(error)
            self._settled += count
            self._answered.notify_all()

    def _record_error(self, error: object) -> None:
        with self._lock:
            self.result.errors += 1
            if self.result.first_error is None:
                self.result.first_error = str(error)


# -- what the consumer saw -----------------------------------------------------------------------------------


@dataclass
class Tally:
    """Correctness counters of one consumer over one run."""

    received: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    corrupt: int = 0
    seen: bytearray = field(default_factory=bytearray)
    unique: int = 0
    max_seq: int = -1
    entries: set[tuple[int, int]] = field(default_factory=set)  # (ledger id, entry id) of what arrived

    def add(self, seq: int, whole: bool, entries: list[tuple[int, int]]) -> None:
        self.received += 1
        if not whole:
            self.corrupt += 1
            if seq > MAX_SEQ:  # garbage where the sequence number should be
                return
        if seq >= len(self.seen):
            self.seen.extend(bytes(seq + 1 - len(self.seen)))
        if self.seen[seq]:
            self.duplicates += 1
            return
        self.seen[seq] = 1
        self.unique += 1
        if seq < self.max_seq:
            self.out_of_order += 1
        else:
            self.max_seq = seq
        self.entries.update(entries)

    def missing(self, receipted: bytearray) -> int:
        """Receipted by the broker, never delivered."""
        seen = self.seen
        return sum(1 for seq, ok in enumerate(receipted) if ok and (seq >= len(seen) or not seen[seq]))

    def unreceipted(self, receipted: bytearray) -> int:
        """Delivered although the producer got an error for it (not a loss; reported beside the errors)."""
        return sum(
            1 for seq, got in enumerate(self.seen) if got and (seq >= len(receipted) or not receipted[seq])
        )


class Consuming:
    """Receives on a thread, acknowledging each message, until everything receipted has arrived.

    It stops once the producer is done and every receipted message was seen, or when nothing new arrived for
    ``idle_timeout_s`` after the producer finished (the rest is then missing).
    """

    def __init__(
        self, consumer: pulsar.Consumer, payloads: Payloads, producing: Producing, chunked: bool = False
    ) -> None:
        self.consumer = consumer
        self.chunked = chunked
        self.payloads = payloads
        self.producing = producing
        self.tally = Tally()
        self.first_at = 0.0  # when the first message arrived
        self.last_new = 0.0  # when the last message not seen before arrived
        self.error: str | None = None
        self._thread: threading.Thread | None = None

    def start(self, idle_timeout_s: float) -> Consuming:
        self._thread = threading.Thread(target=self._run, args=(idle_timeout_s,), name="consume", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> Tally:
        assert self._thread is not None
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.error = "consumer thread did not finish"
        return self.tally

    def _run(self, idle_timeout_s: float) -> None:
        try:
            self._receive_all(idle_timeout_s)
        except Exception as exc:  # reported in the run's result rather than lost on a thread
            self.error = f"{type(exc).__name__}: {exc}"

    def _receive_all(self, idle_timeout_s: float) -> None:
        tally, read = self.tally, self.payloads.read
        # The C++ consumer under pulsar.Consumer, as the producer side uses the C++ producer: the
        # wrapper's per-message Message object and type checks were a good part of the client's
        # cost per message, and the drain rates measured the client more than the brokers.
        consumer = self.consumer._consumer
        chunked = self.chunked
        produced, done = self.producing.result, self.producing.done
        idle_since = time.monotonic()
        chunks = 1  # chunks per chunked message, learnt from those within one ledger
        while True:
            try:
                msg = consumer.receive(RECEIVE_POLL_MS)
            except pulsar.Timeout:
                if done.is_set() and self._complete(produced):
                    return
                if (
                    done.is_set()
                    and time.monotonic() - max(idle_since, self.producing.done_at) > idle_timeout_s
                ):
                    return
                continue
            unique = tally.unique
            msg_id = msg.message_id()
            if chunked:
                entries = _entries(msg_id, chunks)
                if len(entries) > 1 and entries[0][0] == entries[-1][0]:
                    chunks = max(chunks, len(entries))
            else:
                entries = [(msg_id.ledger_id(), msg_id.entry_id())]
            tally.add(*read(msg.data()), entries)
            consumer.acknowledge(msg)
            if tally.unique != unique:
                self.last_new = idle_since = time.monotonic()
                self.first_at = self.first_at or self.last_new
                if done.is_set() and tally.unique >= produced.receipts and self._complete(produced):
                    return

    def _complete(self, produced: Produced) -> bool:
        return self.tally.unique >= produced.receipts and self.tally.missing(produced.receipted) == 0


def _entries(msg_id: pulsar.MessageId, chunks: int) -> list[tuple[int, int]]:
    """The entries a message came in: one, or one per chunk of a chunked message.

    The Python API has no getter for a chunked message's chunks, but its text form names the first and
    the last: ``(0,3,-1,-1);(0,7,-1,-1)``. A single producer's chunks are consecutive entries, so that is
    every entry in between. When a ledger rolled over between them, the new ledger's part is known and
    the old ledger's is taken to make up ``chunks`` (what whole messages of the run had).
    """
    text = str(msg_id)
    if ";" not in text:
        return [(msg_id.ledger_id(), msg_id.entry_id())]
    (first_ledger, first_entry), (last_ledger, last_entry) = (
        tuple(int(n) for n in part.strip("()").split(",")[:2]) for part in text.split(";")[:2]
    )
    if first_ledger == last_ledger:
        return [(first_ledger, entry) for entry in range(first_entry, last_entry + 1)]
    in_old = max(1, chunks - (last_entry + 1))
    return [(first_ledger, first_entry + k) for k in range(in_old)] + [
        (last_ledger, entry) for entry in range(last_entry + 1)
    ]
