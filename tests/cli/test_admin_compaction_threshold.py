"""``magnetar admin namespaces|topics set|get|remove-compaction-threshold`` run as a user runs them,
against a real broker, with pulsar-admin's flags (``-t 10M``, ``--applied``)."""

from __future__ import annotations

import pytest

from .conftest import admin
from .conftest import admin_ok as ok

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a CLI process per call

TOPIC = "persistent://public/default/positions"


def test_compaction_threshold_verbs_round_trip(broker):
    ns = "public/default"
    unset = admin(broker, "namespaces", "get-compaction-threshold", ns)
    assert unset.returncode == 0 and unset.stdout == "" and "not set" in unset.stderr
    ok(broker, "namespaces", "set-compaction-threshold", ns, "-t", "10M")
    assert ok(broker, "namespaces", "get-compaction-threshold", ns) == f"{10 * 1024**2}\n"
    assert ok(broker, "topics", "get-compaction-threshold", TOPIC, "--applied") == f"{10 * 1024**2}\n"
    ok(broker, "topics", "set-compaction-threshold", TOPIC, "--threshold", "0")
    assert ok(broker, "topics", "get-compaction-threshold", TOPIC, "--json") == "0\n"
    assert ok(broker, "topics", "get-compaction-threshold", TOPIC, "-ap") == "0\n"  # its own 0 wins
    ok(broker, "topics", "remove-compaction-threshold", TOPIC)
    ok(broker, "namespaces", "remove-compaction-threshold", ns)
    assert ok(broker, "topics", "get-compaction-threshold", TOPIC, "--applied") == "0\n"  # the broker's
    negative = admin(broker, "namespaces", "set-compaction-threshold", ns, "-t", "-1")
    assert negative.returncode != 0 and "compactionThreshold must be 0 or more" in negative.stderr
    assert "Traceback" not in negative.stderr
    bad = admin(broker, "topics", "set-compaction-threshold", TOPIC, "-t", "lots")
    assert bad.returncode != 0 and "is not a size" in bad.stderr
