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
import bisect
import enum
import json
import logging
from concurrent.futures import Executor

from magnetar.broker.compaction_pause import CompactionCheckpoints, Step
from magnetar.broker.compaction_policies import backlog_estimate
from magnetar.broker.compaction_stats import CompactionRecord
from magnetar.broker.compactor import YIELD_EVERY_S, CompactedView, CompactionOutcome, compact
from magnetar.broker.entry_search import entry_time
from magnetar.broker.ids import is_earliest, is_latest, position_of
from magnetar.broker.seek import position_for_message_id, position_for_time
from magnetar.protocol import ProtocolError, wire
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


class CompactedTopic:
    """Pulsar's ``CompactedTopicImpl`` with the compactor's runs: one at a time per topic."""

    # One for each loaded topic, compacted or not: no instance dict (issue 40).
    __slots__ = (
        "_making_cursor",
        "_running",
        "checkpoints",
        "last_error",
        "ml",
        "record",
        "status",
        "view",
        "yield_every_s",
    )

    def __init__(
        self, ml: ManagedLedger, pause_at: Step | None = None, yield_every_s: float = YIELD_EVERY_S
    ) -> None:
        """``pause_at``: the test-only ``test_compaction_pause_at`` (compaction_pause.py);
        ``yield_every_s``: seconds of work between two yields of the GIL (compactor.py)."""
        self.ml = ml
        self.yield_every_s = yield_every_s
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        #: What the runs did: the topic stats' ``compaction`` section and the metrics.
        self.record = CompactionRecord()
        self.checkpoints = CompactionCheckpoints(ml.name, pause_at)
        self._running: asyncio.Task[None] | None = None
        self._making_cursor: asyncio.Task[ManagedCursor] | None = None
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

    def backlog_estimate(self, durable_cursors: list[ManagedCursor]) -> int:
        """Bytes not compacted yet, as the compaction threshold measures them (compaction_policies.py)."""
        return backlog_estimate(self.ml, self.cursor, durable_cursors)

    def read_compacted(self, start: Position, max_entries: int, max_bytes: int) -> list[Entry]:
        """The view's entries at or after ``start`` with their original positions (none without a view)."""
        if self.view is None:
            return []
        return self.view.ledger.read_from(start, max_entries, max_bytes)

    def earliest(self) -> tuple[Position, bool]:
        """Where a compacted read from the earliest message starts, and whether exactly there: the
        view's first message where the topic's ledgers before it were trimmed (only the view has it
        now), else the topic's first entry."""
        first = self.ml.ceil_position(Position.EARLIEST)
        if self.view is not None and (positions := self.view.ledger.positions) and positions[0] < first:
            return positions[0], True
        return first, False

    # -- seek on a compacted read (Pulsar's forced reset below the horizon) --------------------
    def seek_position(self, msg_id: wire.MessageIdData) -> tuple[Position, bool]:
        """Where a readCompacted consumer's seek to ``msg_id`` lands, and whether exactly there: a
        position up to the horizon is read in the view as it is (its ledger may be trimmed), the
        earliest message is the view's first one."""
        found = position_for_message_id(self.ml, msg_id)  # refuses another topic's id
        horizon = self.horizon
        if horizon is None or is_latest(msg_id):
            return found, False
        if is_earliest(msg_id):
            return self.earliest()
        position = position_of(msg_id)
        return (position, True) if position <= horizon else (found, False)

    def time_position(self, timestamp_ms: int) -> tuple[Position, bool]:
        """Where a readCompacted consumer's seek to a time lands: the first message of the view at
        or after it, unless the topic has an earlier one (its ledgers kept)."""
        found = position_for_time(self.ml, timestamp_ms)
        view = self.view
        if view is None:
            return found, False
        ledger = view.ledger
        index = bisect.bisect_left(
            range(ledger.entries), True, key=lambda i: entry_time(ledger.entry_at(i).data) >= timestamp_ms
        )
        if index < ledger.entries and (in_view := ledger.positions[index]) < found:
            return in_view, True
        return found, False

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
        self.ml.set_compacted_positions(ledger.positions)
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

    def make_cursor(self, executor: Executor | None) -> asyncio.Task[ManagedCursor] | None:
        """Create the ``__compaction`` cursor at the earliest entry, off the loop, unless it is there
        (Pulsar's preCreateSubscriptionForCompactionIfNeeded, for a topic with a compaction
        threshold: from then on nothing is trimmed that compaction has not read)."""
        if self.cursor is not None:
            return None
        if self._making_cursor is None or self._making_cursor.done():
            making = asyncio.get_running_loop().create_task(self._make_cursor(executor))
            making.add_done_callback(self._cursor_made)
            self._making_cursor = making
        return self._making_cursor

    def _cursor_made(self, making: asyncio.Task[ManagedCursor]) -> None:
        """Say why the cursor could not be made (a compaction waiting on it says it too); the next
        check or compaction tries again."""
        if not making.cancelled() and (exc := making.exception()) is not None:
            log.warning("%s: the %s cursor could not be made: %s", self.ml.name, COMPACTION_SUBSCRIPTION, exc)

    async def _make_cursor(self, executor: Executor | None) -> ManagedCursor:
        existing = self.cursor
        if existing is not None:
            return existing
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(
            executor, self.ml.prepare_cursor, COMPACTION_SUBSCRIPTION, "earliest"
        )
        return self.ml.adopt_cursor(prepared)

    async def _run(self, executor: Executor | None) -> None:
        loop = asyncio.get_running_loop()
        record = self.record
        record.started()
        try:
            # The cursor holds every entry from now on, so none goes before it is compacted.
            making = self.make_cursor(executor)
            cursor = self.cursor if making is None else await making
            assert cursor is not None
            done = await loop.run_in_executor(
                executor, _compact_and_open, self.ml, self.view, record, self.checkpoints, self.yield_every_s
            )
            removed = 0
            if done is not None:
                await self._commit(cursor, *done)
                removed = done[0].removed
            record.succeeded(removed)
            self.status = CompactionStatus.SUCCESS
        except Exception as exc:  # reported by the status; the previous view stays
            log.warning("%s: compaction failed: %s", self.ml.name, exc, exc_info=True)
            record.failed()
            self.status = CompactionStatus.ERROR
            self.last_error = f"{type(exc).__name__}: {exc}"

    async def _commit(
        self, cursor: ManagedCursor, outcome: CompactionOutcome, ledger: CompactedLedger
    ) -> None:
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
        self.ml.set_compacted_positions(ledger.positions)
        await self.checkpoints.check_on_loop("after_switch")
        cursor.mark_delete(outcome.horizon)
        self.ml.persist_cursors([cursor])
        await self.checkpoints.check_on_loop("before_delete")
        if previous is not None:
            previous.ledger.close()
            delete_compacted_ledger(self.ml.directory, previous.ledger.ledger_id)
        log.info(
            "%s: compacted up to %s: %d of %d messages kept (ledger %d, %.3f s)",
            self.ml.name,
            outcome.horizon,
            outcome.messages_kept,
            outcome.messages_read,
            outcome.ledger_id,
            outcome.duration_s,
        )

    def stop(self) -> None:
        """The broker is stopping: a compaction under way gives up at its next check."""
        self.checkpoints.stop()

    def close(self) -> None:
        """Close the view's file (storage's half of closing the topic); a run under way stops at its
        next check (or fails reading what is closed)."""
        self.checkpoints.stop()
        if self.view is not None:
            self.view.ledger.close()


def _compact_and_open(
    ml: ManagedLedger,
    view: CompactedView | None,
    record: CompactionRecord,
    checkpoints: CompactionCheckpoints,
    yield_every_s: float,
) -> tuple[CompactionOutcome, CompactedLedger] | None:
    """Both phases, then the new ledger opened for reading (its positions read): the worker thread's part."""
    record.started()  # its duration counts from here, not from its wait for the thread
    outcome = compact(ml, view, record, checkpoints, yield_every_s)
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
