"""kill -9 of the broker process in the middle of a compaction, at each of its steps, with the
official client: afterwards the compacted view is the previous one or the new one, whole and
readable, no file of the other is left, and the next compaction (here by threshold) runs to its end.

The broker is held at a step by the test-only setting ``test_compaction_pause_at``
(``broker/compaction_pause.py``): the test waits for its ``paused at`` line, then kills it."""

from __future__ import annotations

import pulsar
import pytest

from tests.interop.compaction_support import compact, compaction_path, read_all, topic_path
from tests.interop.support import admin_call
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a broker started three times each

#: In the order a compaction reaches them (compaction_pause.STEPS).
STEPS = ("phase_one", "phase_two", "before_switch", "after_switch", "before_delete")
#: The steps at which the new view is recorded already.
SWITCHED = ("after_switch", "before_delete")

FIRST_VIEW = [b"v8", b"v9"]  # v0..v9 over k0, k1
#: The first view and what follows its horizon: a compacted read before the second compaction.
PREVIOUS = [*FIRST_VIEW, *(f"v{i}".encode() for i in range(10, 20))]
NEW = [b"v16", b"v17", b"v18", b"v19"]  # v10..v19 over k0..k3 compacted with the first view


def _send(client, topic: str, values: range, keys: int) -> list:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"v{i}".encode(), partition_key=f"k{i % keys}") for i in values]
    producer.close()
    return ids


def _compacted(client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
    try:
        return [m.data() for m in read_all(reader)]
    finally:
        reader.close()


def _compacted_files(broker) -> set[str]:
    return {path.name for path in broker.data_dir.rglob("compacted/*") if path.is_file()}


def _position(msg_id) -> str:
    return f"{msg_id.ledger_id()}:{msg_id.entry_id()}"


@pytest.mark.parametrize("step", STEPS)
def test_kill_9_during_a_compaction_leaves_the_previous_view_or_the_new_one(
    broker_factory, client_factory, topic, step
):
    broker = broker_factory({"broker_service_compaction_monitor_interval_in_seconds": 0.1})
    client = client_factory(broker.service_url)
    first = _send(client, topic, range(10), keys=2)
    compact(broker, topic)
    second = _send(client, topic, range(10, 20), keys=4)
    client.close()
    broker.stop()
    broker.config["test_compaction_pause_at"] = step
    broker.restart()
    assert admin_call(broker, "PUT", compaction_path(topic))[0] == 204
    eventually(lambda: f"paused at {step}" in broker.log_path.read_text(), what=f"the pause at {step}")
    client = client_factory(broker.service_url)
    # Held there, the broker serves the view it has recorded (in memory as on disk).
    assert _compacted(client, topic) == (NEW if step in SWITCHED else PREVIOUS)
    client.close()
    broker.kill9()
    del broker.config["test_compaction_pause_at"]
    broker.restart()
    client = client_factory(broker.service_url)
    assert _compacted(client, topic) == (NEW if step in SWITCHED else PREVIOUS)
    _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
    ledger = internal["compactedLedger"]["ledgerId"]
    assert _compacted_files(broker) == {f"{ledger:020d}.log", f"{ledger:020d}.idx"}  # nothing else left
    horizon = second[-1] if step in SWITCHED else first[-1]
    assert internal["cursors"]["__compaction"]["markDeletePosition"] == _position(horizon)
    # The next compaction, by threshold: it builds on the view the crash left and ends.
    _send(client, topic, range(20, 21), keys=4)
    assert admin_call(broker, "POST", topic_path(topic) + "/compactionThreshold", 1)[0] == 204
    final = [b"v17", b"v18", b"v19", b"v20"]
    eventually(lambda: _compacted(client, topic) == final, what="the compaction by threshold")
    assert admin_call(broker, "GET", compaction_path(topic))[1]["status"] == "SUCCESS"
    assert len(_compacted_files(broker)) == 2


@pytest.mark.parametrize("step", ["phase_two", "after_switch"])
def test_a_broker_stopped_during_a_compaction_stops_it_and_keeps_a_whole_view(
    broker_factory, client_factory, topic, step
):
    """SIGTERM while a compaction is under way (held at a step on its thread, or on the event loop):
    the broker exits at once and cleanly, the compaction given up; after the restart the view is the
    previous one (before the switch) or the new one (after it), and no other file is left."""
    broker = broker_factory({"test_compaction_pause_at": step})
    client = client_factory(broker.service_url)
    _send(client, topic, range(10), keys=2)
    client.close()
    assert admin_call(broker, "PUT", compaction_path(topic))[0] == 204
    eventually(lambda: f"paused at {step}" in broker.log_path.read_text(), what=f"the pause at {step}")
    assert broker.stop() == 0
    del broker.config["test_compaction_pause_at"]
    broker.restart()
    client = client_factory(broker.service_url)
    everything = [f"v{i}".encode() for i in range(10)]
    assert _compacted(client, topic) == (FIRST_VIEW if step in SWITCHED else everything)
    files = _compacted_files(broker)
    if step in SWITCHED:
        _, internal = admin_call(broker, "GET", topic_path(topic) + "/internalStats")
        ledger = internal["compactedLedger"]["ledgerId"]
        assert files == {f"{ledger:020d}.log", f"{ledger:020d}.idx"}
    else:
        assert files == set()
