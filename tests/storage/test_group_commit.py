"""Group commit and the fsync policies: when on_durable fires, in what order, on which thread."""

from __future__ import annotations

import os
import threading
import time

import pytest

from magnetar.storage import ManagedLedgerFencedError, Position
from tests.waiting import eventually

from .conftest import TOPIC, Durable, add_durable, payloads


def test_a_burst_shares_fsyncs_and_no_callback_beats_its_fsync(storage, ml):
    segment = ml._current  # the test looks at what was really fsynced, not at what storage claims
    early: list[Position] = []

    def on_durable(position, error):
        assert error is None
        if segment.synced_entries <= position.entry_id or ml.last_confirmed < position:
            early.append(position)
        durable(position, error)

    durable = Durable()
    n = 2000
    fsyncs_before = storage.fsync_count
    positions = [ml.add_entry(data, on_durable) for data in payloads(n)]
    assert durable.wait(n) == positions
    assert early == []
    fsyncs = storage.fsync_count - fsyncs_before
    assert 1 <= fsyncs < n / 2
    assert storage.sync_rounds < n / 2


def test_a_lone_entry_gets_its_own_fsync(storage, ml):
    # Nothing else is written: the entry does not wait for company to be synced. (How soon it is
    # synced is measured by ``python -m bench.group_commit``, not asserted here.)
    fsyncs_before = storage.fsync_count
    (position,) = add_durable(ml, [b"one"])
    assert ml.last_confirmed == position and ml._current.synced_entries == 1
    assert storage.fsync_count > fsyncs_before


def test_callbacks_fire_in_position_order_across_rollover(open_storage):
    ml = open_storage(max_ledger_size_bytes=500).open_managed_ledger(TOPIC)
    durable = Durable()
    positions = [ml.add_entry(data, durable) for data in payloads(300, size=50)]
    assert len({p.ledger_id for p in positions}) > 10
    assert durable.wait(300) == positions


def test_callbacks_of_several_managed_ledgers_and_threads(storage):
    ledgers = [storage.open_managed_ledger(f"t{i}") for i in range(4)]
    results: dict[str, Durable] = {ml.name: Durable() for ml in ledgers}
    added: dict[str, list[Position]] = {}

    def produce(ml):
        added[ml.name] = [ml.add_entry(data, results[ml.name]) for data in payloads(200)]

    threads = [threading.Thread(target=produce, args=(ml,)) for ml in ledgers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for ml in ledgers:
        assert results[ml.name].wait(200) == added[ml.name]


def test_callbacks_go_through_notify(open_storage):
    handed: list = []
    storage = open_storage(notify=handed.append)
    ml = storage.open_managed_ledger(TOPIC)
    seen: list[Position] = []
    positions = [ml.add_entry(data, lambda p, e: seen.append(p)) for data in payloads(50)]
    eventually(lambda: ml.last_confirmed == positions[-1], what="every entry durable")
    assert seen == []  # nothing ran on the fsync thread
    fired = 0

    def fire_handed() -> bool:  # as the owner's loop runs what it is handed
        nonlocal fired
        for fire in handed[fired:]:
            fire()
            fired += 1
        return seen == positions

    # A round hands its callbacks over just after it advances last_confirmed: fire them as they come.
    eventually(fire_handed, what="every callback handed over")
    assert 1 <= len(handed) <= storage.sync_rounds  # one hand-off per round, not per entry


def test_interval_policy_lets_writes_gather(open_storage):
    storage = open_storage(fsync_policy="interval", fsync_interval_ms=50)
    ml = storage.open_managed_ledger(TOPIC)
    durable = Durable()
    started = time.monotonic()
    positions = [ml.add_entry(data, durable) for data in payloads(100)]
    assert durable.wait(100) == positions
    assert ml.last_confirmed == positions[-1]
    # The first round waits out the interval after the first write: a lower bound that holds
    # whatever the load (the syncer waits on the monotonic clock until the interval is over) ...
    assert time.monotonic() - started >= 0.049  # 50 ms, less float rounding
    # ... and the writes made meanwhile share rounds. (How few rounds a burst takes is a
    # performance figure: ``python -m bench.group_commit`` measures it.)
    assert storage.sync_rounds < len(positions)


def test_never_policy_completes_right_after_the_write(open_storage):
    storage = open_storage(fsync_policy="never")
    ml = storage.open_managed_ledger(TOPIC)
    durable = Durable()
    positions = [ml.add_entry(data, durable) for data in payloads(20)]
    assert [p for p, _ in durable.results] == positions  # already, with no waiting
    assert ml.last_confirmed == positions[-1]
    assert storage.fsync_count == 0
    storage.close()
    assert storage.fsync_count > 0  # close still syncs
    reopened = open_storage(fsync_policy="never").open_managed_ledger(TOPIC)
    assert len(reopened.read_entries(Position.EARLIEST, 100)) == 20


def test_never_policy_uses_notify_too(open_storage):
    handed: list = []
    ml = open_storage(fsync_policy="never", notify=handed.append).open_managed_ledger(TOPIC)
    seen: list = []
    ml.add_entry(b"x", lambda p, e: seen.append(p))
    assert seen == [] and len(handed) == 1
    handed[0]()
    assert seen == [ml.last_confirmed]


def test_a_failed_fsync_fails_callbacks_and_fences(open_storage):
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    kept = add_durable(ml, [b"kept"])
    null_fd = os.open(os.devnull, os.O_RDWR)
    os.dup2(null_fd, ml._current._log_fd)  # fdatasync on /dev/null fails with EINVAL
    os.close(null_fd)
    durable = Durable()
    ml.add_entry(b"lost", durable)
    durable.wait(1)
    position, error = durable.results[0]
    assert position is None and isinstance(error, OSError)
    assert ml.fenced and ml.last_confirmed == kept[0]
    with pytest.raises(ManagedLedgerFencedError):
        ml.add_entry(b"refused")
    storage.close()
    ml = open_storage().open_managed_ledger(TOPIC)
    assert [e.data for e in ml.read_entries(Position.EARLIEST, 10)] == [b"kept"]
    assert not ml.fenced


def test_a_raising_callback_does_not_stop_the_others(ml):
    durable = Durable()

    def bad(position, error):
        raise RuntimeError("callback bug")

    ml.add_entry(b"a", bad)
    second = ml.add_entry(b"b", durable)
    assert durable.wait(1) == [second]
    assert durable.results == [(second, None)]  # completed, without the first one's error
    assert add_durable(ml, [b"c"]) == [ml.last_confirmed]


# -- rounds on the owner's thread (a broker's event loop) ------------------------------------


class Deferred:
    """Plays the owner's event loop: holds deferred rounds until the test runs them."""

    def __init__(self) -> None:
        self.waiting: list = []

    def __call__(self, callback) -> None:
        self.waiting.append(callback)

    def run(self) -> int:
        batch, self.waiting = self.waiting, []
        for callback in batch:
            callback()
        return len(batch)


def test_with_a_defer_hook_a_round_runs_on_the_owner_thread_once_per_pass(open_storage):
    deferred = Deferred()
    storage = open_storage(defer=deferred)
    ml = storage.open_managed_ledger(TOPIC)
    other = storage.open_managed_ledger(TOPIC + "-2")
    fired: list[tuple[Position, int]] = []

    def on_durable(position, error):
        assert error is None
        fired.append((position, threading.get_ident()))

    positions = [ml.add_entry(data, on_durable) for data in payloads(30)]
    positions.append(other.add_entry(b"elsewhere", on_durable))
    assert len(deferred.waiting) == 1  # one round for the whole pass, both managed ledgers
    # An add from another thread goes to the fsync thread: once its round is over, that thread
    # has had its chance to sync the owner's entries too, and must not have.
    third = storage.open_managed_ledger(TOPIC + "-3")
    from_thread = Durable()
    fsyncs = storage.fsync_count
    adder = threading.Thread(target=third.add_entry, args=(b"other thread", from_thread))
    adder.start()
    adder.join()
    assert from_thread.wait(1) != [None]
    eventually(lambda: storage.fsync_count > fsyncs, what="the fsync thread's round counted")
    assert storage.sync_rounds == 1
    assert fired == [] and ml.last_confirmed < positions[0]  # nothing is durable before the pass ends
    fsyncs = storage.fsync_count
    assert deferred.run() == 1
    assert [p for p, _ in fired] == positions
    assert {thread for _, thread in fired} == {threading.get_ident()}
    assert storage.fsync_count - fsyncs == 2  # one fdatasync per managed ledger
    assert storage.inline_sync_rounds == 1 and storage.sync_rounds == 2
    assert ml._current.synced_entries == 30


def test_rounds_go_to_the_fsync_thread_while_fsyncs_are_slow(open_storage):
    deferred = Deferred()
    # Any real fsync takes longer than a nanosecond: after one round on the owner's
    # thread the moving average says "slow", and later rounds go to the thread.
    storage = open_storage(defer=deferred, fsync_inline_max_ms=1e-6)
    ml = storage.open_managed_ledger(TOPIC)
    durable = Durable()
    first = ml.add_entry(b"first", durable)
    assert deferred.run() == 1
    assert durable.wait(1) == [first]
    rest = [ml.add_entry(data, durable) for data in payloads(20)]
    assert durable.wait(21) == [first, *rest]  # completed without the owner running anything
    assert deferred.waiting == []
    assert storage.inline_sync_rounds == 1 and storage.sync_rounds >= 2


def test_adds_from_another_thread_are_synced_by_the_fsync_thread(open_storage):
    deferred = Deferred()
    ml = open_storage(defer=deferred).open_managed_ledger(TOPIC)
    durable = Durable()
    added: list[Position] = []
    thread = threading.Thread(target=lambda: added.extend(ml.add_entry(d, durable) for d in payloads(10)))
    thread.start()
    thread.join()
    assert durable.wait(10) == added
    assert deferred.waiting == []


@pytest.mark.parametrize("policy", ["interval", "never"])
def test_only_the_always_policy_runs_rounds_on_the_owner_thread(open_storage, policy):
    deferred = Deferred()
    ml = open_storage(defer=deferred, fsync_policy=policy, fsync_interval_ms=1).open_managed_ledger(TOPIC)
    durable = Durable()
    positions = [ml.add_entry(data, durable) for data in payloads(10)]
    assert durable.wait(10) == positions
    assert deferred.waiting == []
