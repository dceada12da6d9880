"""One topic's (partition's) copy to one remote cluster, as Pulsar's PersistentReplicator.

It reads the topic's durable cursor ``pulsar.repl.{remote}`` and sends each entry to the same
topic on the remote with ``Producer.send_stored`` (entry_copy.py says what is sent), and moves
the cursor past an entry once the remote has stored it. So:

- **Exactly once.** The producer's name is fixed per topic and remote, and the sequence ids come
  from the entries' broker index; with the remote's deduplication (always on for this producer
  on a Magnetar remote, to be enabled on a Pulsar one), what is sent again after a crash of
  either side or a lost connection is dropped there. The cursor is durable, so a restart resumes
  where the remote's receipts left it.
- **Nothing skipped silently.** An entry the remote refuses, or one that cannot be copied, holds
  the replicator at it: it is tried again with backoff and its error is in the stats, never
  acknowledged unsent (replicator_state.py for what a refusal does to deduplication).
- **Backpressure holds the cursor, not memory.** At most ``WINDOW_ENTRIES`` entries and
  ``WINDOW_BYTES`` bytes are in flight; with the remote slow or away the cursor waits and the
  local backlog (``replicationBacklog``) grows, while local producers go on as before.
- **In order.** One producer, sends in cursor order, the remote's receipts in that order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.replication import producer_name
from magnetar.broker.traffic import Traffic
from magnetar.client.errors import (
    AlreadyClosed,
    MessageTooBig,
    ProducerBlockedQuotaExceededError,
    ProducerBlockedQuotaExceededException,
    ServerError,
)
from magnetar.client.producer import Producer
from magnetar.replication.entry_copy import Copy, Skip, Unreplicable, copy_of
from magnetar.replication.replicator_state import ReplicatorState
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.topic import PersistentTopic
    from magnetar.replication.remote import Remote

log = logging.getLogger(__name__)

#: Entries and bytes sent and not yet receipted, at most.
WINDOW_ENTRIES = 1000
WINDOW_BYTES = 16 * 1024 * 1024
#: One cursor read.
READ_ENTRIES = 100
READ_BYTES = 4 * 1024 * 1024
#: Backoff between tries after an error or a refusal.
FIRST_BACKOFF_S = 0.1
MAX_BACKOFF_S = 30.0
#: How long the sends behind a refused one are waited for before trying again.
SETTLE_TIMEOUT_S = 30.0
#: How long ``stop`` waits for the copy to end.
STOP_TIMEOUT_S = 10.0


def next_backoff(previous: float, progressed: bool) -> float:
    """The wait before trying again after a failure: ``FIRST_BACKOFF_S`` when the copy got on
    since the last failure (or none came before), else twice the last wait, up to
    ``MAX_BACKOFF_S``. Progress, not a producer opened, starts it over: an entry the remote
    refuses fails right after the producer opens, and must not be retried ten times a second."""
    if progressed or previous <= 0:
        return FIRST_BACKOFF_S
    return min(previous * 2, MAX_BACKOFF_S)


@dataclass(slots=True)
class InFlight:
    """An entry read and sent (or skipped: no future), waiting for the remote's receipt."""

    position: Position
    future: asyncio.Future | None
    size: int = 0
    messages: int = 0


class Held(Exception):
    """The replicator stops at ``position`` (refused, or not copyable) and tries again later."""

    def __init__(self, position: Position, why: str) -> None:
        super().__init__(f"held at {position}: {why}")
        self.position = position


class NewEpoch(Exception):
    """The remote took a refused entry for a duplicate: go on in the next epoch (higher sequence ids)."""


def is_refusal(exc: BaseException) -> bool:
    """The remote answered this send with an error (it did not store it); not a lost
    connection, a close or a blocked producer, after which a send may or may not be stored."""
    if isinstance(exc, MessageTooBig):
        return True
    blocked = (ProducerBlockedQuotaExceededError, ProducerBlockedQuotaExceededException)
    return isinstance(exc, ServerError) and not isinstance(exc, blocked)


class Replicator:
    """Copies ``topic`` to the cluster ``remote``; ``start`` it, ``stop`` it (the manager does)."""

    def __init__(self, topic: PersistentTopic, remote: Remote, local: str, partitions: int = 0) -> None:
        self.topic = topic
        self.remote = remote
        self.local = local
        #: The partitioned topic's partition count (0: not a partition).
        self.partitions = partitions
        self.cursor = topic.replication_cursors[remote.name]
        self.state = ReplicatorState.load(topic.ml, remote.name)
        self.traffic = Traffic()
        self.producer: Producer | None = None
        self.connected_since: str = ""
        self.last_error: str = ""
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        #: Set by ``stop``: the loops end at their next turn even if a cancel was lost on the way.
        self._stopped = False

    # -- the topic's side (broker.replication.ReplicatorLink) -------------------------------------
    def notify_new_entries(self) -> None:
        self._wake.set()

    def stats(self) -> dict[str, Any]:
        """Its part of Pulsar's ReplicatorStats (the topic adds the cursor's backlog and delay:
        broker.replication.replication_stats), with the producer's name, the epoch, the entries
        the remote refused and the last error besides."""
        producer = self.producer
        connected = producer is not None and producer.is_connected()
        traffic = self.traffic
        return {
            "msgRateOut": traffic.rate_out,
            "msgThroughputOut": traffic.throughput_out,
            "msgOutCount": traffic.messages_out,
            "bytesOutCount": traffic.bytes_out,
            "connected": connected,
            "outboundConnection": self.remote.client.service_url if connected else "",
            "outboundConnectedSince": self.connected_since if connected else "",
            "producerName": producer_name(self.local, self.remote.name),
            "epoch": self.state.epoch,
            "refusedEntries": len(self.state.refused),
            "lastError": self.last_error,
        }

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self) -> None:
        self.topic.replicators[self.remote.name] = self
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replicator {self}")

    async def stop(self) -> None:
        self._stopped = True
        if self.topic.replicators.get(self.remote.name) is self:
            del self.topic.replicators[self.remote.name]
        if self._task is not None:
            self._task.cancel()
            self._wake.set()
            await asyncio.wait([self._task], timeout=STOP_TIMEOUT_S)
            if not self._task.done():
                log.warning("%s: still stopping after %.0f s", self, STOP_TIMEOUT_S)
            self._task = None
        await self._close_producer()

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def __str__(self) -> str:
        return f"{self.topic.name} -> {self.remote.name}"

    # -- the copy ---------------------------------------------------------------------------------
    async def _run(self) -> None:
        backoff = 0.0
        while not self._stopped:
            start = self.cursor.mark_delete_position
            try:
                await self._open_producer()
                assert self.producer is not None
                await self._copy(self.producer)
            except asyncio.CancelledError:
                raise
            except NewEpoch:
                self.state.epoch += 1
                self.state.save(self.topic.ml, self.remote.name)
                log.warning(
                    "%s: the remote took a refused entry for a duplicate; epoch %d", self, self.state.epoch
                )
                backoff = FIRST_BACKOFF_S
            except Exception as exc:
                backoff = next_backoff(backoff, progressed=self.cursor.mark_delete_position != start)
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: %s; trying again in %.1f s", self, self.last_error, backoff)
            await self._close_producer()
            self.cursor.rewind()
            await asyncio.sleep(backoff)

    async def _open_producer(self) -> None:
        if self.partitions:
            await self.remote.ensure_partitions(self.topic.name, self.partitions)
        producer = await self.remote.client.create_producer(
            str(self.topic.name),
            producer_name=producer_name(self.local, self.remote.name),
            batching_enabled=False,
            chunking_enabled=False,
            send_timeout_millis=0,
            max_pending_messages=WINDOW_ENTRIES,
            block_if_queue_full=True,
            fail_refused_sends=True,
        )
        if not isinstance(producer, Producer):
            await producer.close()
            raise Unreplicable(f"{self.topic.name} is a partitioned topic on cluster {self.remote.name}")
        self.producer = producer
        self.connected_since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    async def _close_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(5):
                    await producer.close()

    async def _copy(self, producer: Producer) -> None:
        in_flight: deque[InFlight] = deque()
        window_bytes = 0
        try:
            while not self._stopped:
                while in_flight and (in_flight[0].future is None or in_flight[0].future.done()):
                    sent = in_flight.popleft()
                    window_bytes -= sent.size
                    self._settle(sent)
                head = in_flight[0].future if in_flight else None
                if len(in_flight) >= WINDOW_ENTRIES or window_bytes >= WINDOW_BYTES:
                    assert head is not None
                    await asyncio.wait([head])
                    continue
                entries = self.cursor.read_entries(READ_ENTRIES, READ_BYTES)
                if not entries:
                    self._wake.clear()
                    if not self.cursor.has_more_entries():
                        await self._wait_for_work(head)
                    continue
                for entry in entries:
                    sent = await self._send(producer, entry.position, entry.data)
                    in_flight.append(sent)
                    window_bytes += sent.size
        except (Held, NewEpoch, Unreplicable):
            await self._wind_down(in_flight)
            raise

    async def _wait_for_work(self, head: asyncio.Future | None) -> None:
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait([wake] if head is None else [wake, head], return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()

    async def _send(self, producer: Producer, position: Position, data) -> InFlight:
        try:
            copy = copy_of(data, self.local, self.remote.name, self.state.epoch)
        except Unreplicable as exc:
            raise Held(position, f"entry cannot be replicated: {exc}") from None
        if isinstance(copy, Skip):
            return InFlight(position, None)
        assert isinstance(copy, Copy)
        try:
            future = await producer.send_stored(
                copy.metadata,
                copy.payload,
                sequence_id=copy.sequence_id,
                highest_sequence_id=copy.highest_sequence_id,
                num_messages=copy.num_messages,
                is_chunk=copy.is_chunk,
            )
        except MessageTooBig as exc:
            self._refused(position)
            raise Held(position, f"cluster {self.remote.name} refuses it: {exc}") from None
        return InFlight(position, future, copy.size, copy.num_messages)

    def _settle(self, sent: InFlight) -> None:
        """The head of the window is done: move the cursor past it, or stop there."""
        if sent.future is not None:
            exc = sent.future.exception()
            if exc is not None:
                if is_refusal(exc):
                    self._refused(sent.position)
                raise Held(sent.position, f"cluster {self.remote.name}: {exc}")
            self._stored(sent, duplicate=sent.future.result().ledger_id() < 0)
        self.cursor.mark_delete(sent.position)

    def _stored(self, sent: InFlight, duplicate: bool) -> None:
        """The remote holds ``sent`` (``duplicate``: from an earlier send, it says)."""
        if sent.position in self.state.refused:
            if duplicate:  # it was refused, so the "earlier send" is a later entry's sequence id
                raise NewEpoch()
            self.state.refused.discard(sent.position)
            self.state.save(self.topic.ml, self.remote.name)
        self.last_error = ""
        if not duplicate:
            self.traffic.messages_out += sent.messages
            self.traffic.bytes_out += sent.size

    def _refused(self, position: Position) -> None:
        if position not in self.state.refused:
            self.state.refused.add(position)
            self.state.save(self.topic.ml, self.remote.name)

    async def _wind_down(self, in_flight: deque[InFlight]) -> None:
        """After a stop at the head: wait (a while) for the sends behind it and keep what they
        tell, so nothing the remote stored is sent again and nothing refused is lost."""
        futures = [s.future for s in in_flight if s.future is not None]
        if futures:
            await asyncio.wait(futures, timeout=SETTLE_TIMEOUT_S)
        for sent in in_flight:
            future = sent.future
            if future is None or not future.done():
                continue
            exc = future.exception()
            if exc is None:
                duplicate = future.result().ledger_id() < 0
                if duplicate and sent.position in self.state.refused:
                    continue  # sent again in the next epoch
                with contextlib.suppress(NewEpoch):
                    self._stored(sent, duplicate)
                self.cursor.delete([sent.position])
            elif is_refusal(exc):
                self._refused(sent.position)
            elif not isinstance(exc, AlreadyClosed):
                log.debug("%s: %s after the stop: %s", self, sent.position, exc)
