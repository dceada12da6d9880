"""A persistent topic's compaction: its current compacted view, the compactor's runs and their status.

Pulsar keeps the compacted ledger's id in the ``__compaction`` cursor's properties and moves that
cursor to the horizon with the same mark-delete. Here the cursor's properties are the managed
ledger's property ``cursor.__compaction.properties`` (``CompactedTopicLedger``, its entry count and
the horizon, one JSON value): one durable metadata commit switches from the previous view to the
new one, so a crash leaves one or the other whole. The cursor then moves to the horizon (a crash in
between: it is moved on the next load) and holds back trimming of what is not compacted yet; the
previous compacted ledger is deleted last (a crash before: ``remove_unused`` on the next load).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass

from magnetar.broker.compactor import CompactedView, CompactionOutcome, compact
from magnetar.protocol import ProtocolError
from magnetar.protocol.compaction import kept_bits
from magnetar.storage.compacted_ledger import CompactedLedger, delete_compacted_ledger, remove_unused
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.entry import Entry
from magnetar.storage.errors import StorageClosedError
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.position import Position

log = logging.getLogger(__name__)

#: Pulsar's name of the compactor's subscription (its cursor).
COMPACTION_SUBSCRIPTION = "__compaction"
#: Pulsar's name of the cursor property naming the compacted ledger.
COMPACTED_TOPIC_LEDGER = "CompactedTopicLedger"
PROPERTIES_KEY = f"cursor.{COMPACTION_SUBSCRIPTION}.properties"


class CompactionStatus(enum.Enum):
    """Pulsar's ``LongRunningProcessStatus.Status``."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


@dataclass(frozen=True, slots=True)
class LastCompaction:
    """What the topic stats' ``compaction`` section shows of the last successful run."""

    removed_event_count: int
    succeed_timestamp_ms: int
    duration_ms: int


class CompactedTopic:
    """Pulsar's ``CompactedTopicImpl`` with the compactor's runs: one at a time per topic."""

    def __init__(self, ml: ManagedLedger) -> None:
        self.ml = ml
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.last: LastCompaction | None = None
        self._running: asyncio.Task[None] | None = None
        self.view = self._load()

    @property
    def horizon(self) -> Position | None:
        return None if self.view is None else self.view.horizon

    @property
    def cursor(self) -> ManagedCursor | None:
        return self.ml.cursors().get(COMPACTION_SUBSCRIPTION)

    @property
    def running(self) -> bool:
        return self._running is not None and not self._running.done()

    def read_compacted(self, start: Position, max_entries: int, max_bytes: int) -> list[Entry]:
        """The view's entries at or after ``start`` with their original positions (none without a view)."""
        if self.view is None:
            return []
        return self.view.ledger.read_from(start, max_entries, max_bytes)

    def last_message(self) -> tuple[Position, int]:
        """The view's last message: its entry's position and the batch index of the batch's last kept
        message (-1: not a batch); ``Position.EARLIEST`` for an empty view or none.

        Pulsar answers GET_LAST_MESSAGE_ID of a readCompacted consumer with this while the view covers
        the whole topic: the topic's last message may be a tombstone or keyless, which that consumer
        never gets, and ``hasMessageAvailable`` would wait for it for ever.
        """
        if self.view is None or not self.view.ledger.positions:
            return Position.EARLIEST, -1
        entry = self.view.ledger.read_from(self.view.ledger.positions[-1], 1)[0]
        return entry.position, last_kept_index(entry.data)

    def _load(self) -> CompactedView | None:
        raw = self.ml.get_property(PROPERTIES_KEY)
        if raw is None:
            remove_unused(self.ml.directory, None)
            return None
        properties = json.loads(raw)
        ledger_id = int(properties[COMPACTED_TOPIC_LEDGER])
        horizon = Position(*properties["horizon"])
        remove_unused(self.ml.directory, ledger_id)
        ledger = CompactedLedger(self.ml.directory, ledger_id, int(properties["entries"]))
        cursor = self.cursor
        if cursor is not None and cursor.mark_delete_position < horizon:
            cursor.mark_delete(horizon)  # the switch was committed, the cursor's move was not
        return CompactedView(ledger, horizon)

    def start(self, executor: Executor | None) -> asyncio.Task[None] | None:
        """Start a compaction in the background; None when one is running already (Pulsar's 409)."""
        if self.running:
            return None
        self.status = CompactionStatus.RUNNING
        self.last_error = ""
        self._running = asyncio.get_running_loop().create_task(self._run(executor))
        return self._running

    async def _run(self, executor: Executor | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            cursor = self.cursor
            if cursor is None:  # holds every entry from now on, so none goes before it is compacted
                prepared = await loop.run_in_executor(
                    executor, self.ml.prepare_cursor, COMPACTION_SUBSCRIPTION, "earliest"
                )
                cursor = self.ml.adopt_cursor(prepared)
            done = await loop.run_in_executor(executor, _compact_and_open, self.ml, self.view)
            if done is not None:
                self._commit(cursor, *done)
            self.status = CompactionStatus.SUCCESS
        except Exception as exc:  # reported by the status; the previous view stays
            log.warning("%s: compaction failed: %s", self.ml.name, exc, exc_info=True)
            self.status = CompactionStatus.ERROR
            self.last_error = f"{type(exc).__name__}: {exc}"

    def _commit(self, cursor: ManagedCursor, outcome: CompactionOutcome, ledger: CompactedLedger) -> None:
        """The switch to the new view (one metadata commit), then the cursor, then the old ledger."""
        if self.ml.closed:  # unloaded or deleted meanwhile: the new ledger is left for remove_unused
            raise StorageClosedError(f"managed ledger {self.ml.name} is closed")
        properties = {
            COMPACTED_TOPIC_LEDGER: outcome.ledger_id,
            "entries": outcome.entries,
            "horizon": list(outcome.horizon),
        }
        try:
            self.ml.set_property(PROPERTIES_KEY, json.dumps(properties))
        except BaseException:
            ledger.close()
            delete_compacted_ledger(self.ml.directory, outcome.ledger_id)
            raise
        previous, self.view = self.view, CompactedView(ledger, outcome.horizon)
        cursor.mark_delete(outcome.horizon)
        self.ml.persist_cursors([cursor])
        self.last = LastCompaction(outcome.removed, int(time.time() * 1000), int(outcome.duration_s * 1000))
        if previous is not None:
            previous.ledger.close()
            delete_compacted_ledger(self.ml.directory, previous.ledger.ledger_id)
        log.info(
            "%s: compacted up to %s: %d of %d messages kept (ledger %d)",
            self.ml.name,
            outcome.horizon,
            outcome.messages_kept,
            outcome.messages_read,
            outcome.ledger_id,
        )

    def close(self) -> None:
        """Close the view's file (storage's half of closing the topic; a run under way then fails)."""
        if self.view is not None:
            self.view.ledger.close()


def _compact_and_open(
    ml: ManagedLedger, view: CompactedView | None
) -> tuple[CompactionOutcome, CompactedLedger] | None:
    """Both phases, then the new ledger opened for reading (its positions read): the worker thread's part."""
    outcome = compact(ml, view)
    if outcome is None:
        return None
    try:
        return outcome, CompactedLedger(ml.directory, outcome.ledger_id, outcome.entries)
    except BaseException:
        delete_compacted_ledger(ml.directory, outcome.ledger_id)
        raise


def last_kept_index(entry: bytes | memoryview) -> int:
    """The batch index of a compacted entry's last kept message: -1 for one that is not a batch (or
    one that cannot be read: its last position is still the answer, as for the topic's last entry)."""
    try:
        bits = kept_bits(entry)
    except ProtocolError:
        return -1
    if bits is None:
        return -1
    for word_index in range(len(bits) - 1, -1, -1):
        word = bits[word_index] & ((1 << 64) - 1)
        if word:
            return word_index * 64 + word.bit_length() - 1
    return -1
