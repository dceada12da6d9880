"""Which ledgers are offloaded when (tiered storage, docs/tiered-storage.md), run on the
offloader's threads: by each topic's ``offloadThreshold`` and ``offloadThresholdInSeconds``
(``check``, from the background work, a slice of topics at a time), or up to a message id by the
admin API (``trigger``, Pulsar's ``PUT .../offload``, whose last run ``status`` answers as
Pulsar's OffloadProcessStatus); local copies deleted once ``offloadDeletionLag`` has passed;
objects nobody owns deleted (``sweep``).

The event loop only decides and records: uploads, verifications and deletes run on the offload
threads, one run at a time per topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from magnetar.broker.errors import BrokerError, NotAllowed
from magnetar.broker.offload_policies import OffloadPolicies
from magnetar.broker.topic import PersistentTopic
from magnetar.offload.object_io import OffloadCancelled
from magnetar.offload.offloader import LedgerOffloader
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.managed_ledger import ManagedLedger
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.offload_selection import before_ledger, first_unoffloaded, over_threshold
from magnetar.storage.position import Position

log = logging.getLogger(__name__)

NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"
ALREADY_RUNNING = "Offload already in progress"


class OffloadConflict(BrokerError):
    """An offload of the topic is running (Pulsar answers 409)."""

    code = wire.NotAllowedError


@dataclass
class TopicOffloads:
    """A topic's offloads since the broker started: the last admin-triggered run (its status) and
    what topic stats show (Pulsar's lastOffload* fields)."""

    status: str = NOT_RUN
    last_error: str = ""
    first_unoffloaded: Position | None = None
    running: Future | None = field(default=None, repr=False)
    last_ledger_id: int = 0
    last_success_ms: int = 0
    last_failure_ms: int = 0

    @property
    def busy(self) -> bool:
        return self.running is not None and not self.running.done()


class Offloads:
    def __init__(
        self,
        offloader: LedgerOffloader | None,
        metadata: MetadataStore,
        policies: Callable[[TopicName], OffloadPolicies],
    ) -> None:
        self.offloader = offloader
        self._metadata = metadata
        self._policies = policies
        self._topics: dict[str, TopicOffloads] = {}
        self._sweeping: Future | None = None

    @property
    def enabled(self) -> bool:
        return self.offloader is not None

    def of(self, topic: TopicName) -> TopicOffloads:
        return self._topics.setdefault(str(topic), TopicOffloads())

    # -- what the admin API asks ---------------------------------------------------------------------
    def trigger(self, topic: PersistentTopic, before: Position) -> list[int]:
        """Offload every closed local ledger before ``before``'s ledger (Pulsar's ``PUT .../offload``);
        the ids to offload. OffloadConflict while a run is under way; NotAllowed without a driver."""
        if self.offloader is None:
            raise NotAllowed("tiered storage is off: no managed_ledger_offload_driver is configured")
        state = self.of(topic.name)
        if state.busy:
            raise OffloadConflict(ALREADY_RUNNING)
        ledger_ids = [info.ledger_id for info in before_ledger(topic.ml.ledgers(), before.ledger_id)]
        state.status, state.last_error = RUNNING, ""
        state.running = self._start(topic.ml, state, ledger_ids, manual=True)
        return ledger_ids

    def status(self, topic: PersistentTopic, partition: int) -> dict:
        """Pulsar's OffloadProcessStatus JSON of the last run the admin API started."""
        state = self.of(topic.name)
        first = state.first_unoffloaded
        if first is None:
            info = first_unoffloaded(topic.ml.ledgers())
            first = Position(info.ledger_id, 0) if info is not None else Position(-1, -1)
        return {
            "status": state.status,
            "lastError": state.last_error,
            "firstUnoffloadedMessage": {
                "ledgerId": first.ledger_id,
                "entryId": first.entry_id,
                "partitionIndex": partition,
            },
        }

    # -- the background work -------------------------------------------------------------------------
    def check(self, topic: PersistentTopic) -> None:
        """Offload what the topic's threshold says (unless a run is under way), and delete the local
        copies whose deletion lag has passed."""
        ml = topic.ml
        policies = self._policies(topic.name)
        if policies.deletion_lag_ms >= 0:
            ml.delete_offloaded_local(policies.deletion_lag_ms / 1000.0)
        if self.offloader is None or not policies.automatic:
            return
        state = self.of(topic.name)
        if state.busy:
            return
        chosen = over_threshold(
            ml.ledgers(), policies.threshold_bytes, policies.threshold_seconds, time.time()
        )
        if chosen:
            state.running = self._start(ml, state, [info.ledger_id for info in chosen], manual=False)

    def sweep(self) -> None:
        """Delete objects nobody owns (on an offload thread; one sweep at a time)."""
        if self.offloader is None or (self._sweeping is not None and not self._sweeping.done()):
            return
        if not self._metadata.offload_garbage(1):
            return
        self._sweeping = self.offloader.submit(self._sweep)

    def _sweep(self) -> None:
        assert self.offloader is not None
        try:
            while self.offloader.sweep_garbage(self._metadata):
                pass
        except Exception as exc:
            log.warning("deleting offloaded objects nobody owns failed (tried again later): %s", exc)

    def _start(self, ml: ManagedLedger, state: TopicOffloads, ledger_ids: list[int], manual: bool) -> Future:
        assert self.offloader is not None
        return self.offloader.submit(self._run, ml, state, ledger_ids, manual)

    def _run(self, ml: ManagedLedger, state: TopicOffloads, ledger_ids: list[int], manual: bool) -> None:
        """On an offload thread: the ledgers one by one, oldest first; the first failure ends the run
        (the rest are tried again by the next check)."""
        assert self.offloader is not None
        error = ""
        for ledger_id in ledger_ids:
            try:
                if self.offloader.offload_ledger(ml, ledger_id):
                    state.last_ledger_id = ledger_id
                    state.last_success_ms = int(time.time() * 1000)
            except OffloadCancelled:
                return  # the broker stops: the rest is offloaded after the restart
            except Exception as exc:
                error = f"Error offloading: {self.offloader.figures.last_error or exc}"
                state.last_failure_ms = int(time.time() * 1000)
                log.error(
                    "%s: offloading ledger %d failed (tried again later): %s", ml.name, ledger_id, error
                )
                break
        if manual:
            info = first_unoffloaded(ml.ledgers()) if not ml.closed else None
            state.first_unoffloaded = Position(info.ledger_id, 0) if info is not None else None
            state.last_error = error
            state.status = ERROR if error else SUCCESS

    def close(self) -> None:
        """Uploads under way are given up (not counted done; made again after a restart), waiting
        for them a short while only (``LedgerOffloader.close``)."""
        if self.offloader is not None:
            self.offloader.close()
