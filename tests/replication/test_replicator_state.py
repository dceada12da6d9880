"""A replicator's durable state (epoch, refused entries) on a real managed ledger: it survives
the ledger's reopening and goes with ``delete``; one remote's state is not another's."""

from __future__ import annotations

from magnetar.replication.replicator_state import ReplicatorState
from magnetar.storage import Position
from tests.storage.conftest import TOPIC, open_storage  # noqa: F401 - the fixture is used by name


def test_nothing_saved_loads_as_epoch_zero_and_nothing_refused(open_storage):  # noqa: F811
    ml = open_storage().open_managed_ledger(TOPIC)
    assert ReplicatorState.load(ml, "centre") == ReplicatorState(0, set())


def test_save_load_delete_round_trip_across_a_reopen(open_storage):  # noqa: F811
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    state = ReplicatorState(epoch=3, refused={Position(12, 7), Position(4, 0), Position(12, 1)})
    state.save(ml, "centre")
    ReplicatorState(epoch=1).save(ml, "other")
    storage.close()

    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    assert ReplicatorState.load(ml, "centre") == state
    assert ReplicatorState.load(ml, "other") == ReplicatorState(1, set())

    ReplicatorState.delete(ml, "centre")
    ReplicatorState.delete(ml, "centre")  # deleting what is gone is fine
    ReplicatorState.delete(ml, "never-saved")
    assert ReplicatorState.load(ml, "centre") == ReplicatorState()
    storage.close()

    ml = open_storage().open_managed_ledger(TOPIC)
    assert ReplicatorState.load(ml, "centre") == ReplicatorState()
    assert ReplicatorState.load(ml, "other").epoch == 1


def test_a_later_save_replaces_the_earlier(open_storage):  # noqa: F811
    storage = open_storage()
    ml = storage.open_managed_ledger(TOPIC)
    ReplicatorState(epoch=0, refused={Position(3, 3)}).save(ml, "centre")
    ReplicatorState(epoch=1, refused=set()).save(ml, "centre")
    storage.close()
    assert ReplicatorState.load(open_storage().open_managed_ledger(TOPIC), "centre") == ReplicatorState(
        1, set()
    )
