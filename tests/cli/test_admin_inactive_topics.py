"""``magnetar admin namespaces|topics set|get|remove-inactive-topic-policies`` run as a user runs
them, against a real broker, with pulsar-admin's flags."""

from __future__ import annotations

import json

import pytest

from .conftest import admin
from .conftest import admin_ok as ok

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: a CLI process per call

TOPIC = "persistent://public/default/devices"
POLICIES = {
    "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
    "maxInactiveDurationSeconds": 3600,
    "deleteWhileInactive": True,
}


def as_json(broker, *args: str):
    return json.loads(ok(broker, *args, "--json"))


def test_inactive_topic_policy_verbs_round_trip(broker):
    ns = "public/default"
    assert as_json(broker, "namespaces", "get-inactive-topic-policies", ns) is None
    flags = ("-e", "-t", "1h", "-m", "delete_when_subscriptions_caught_up")
    ok(broker, "namespaces", "set-inactive-topic-policies", ns, *flags)
    assert as_json(broker, "namespaces", "get-inactive-topic-policies", ns) == POLICIES
    ok(
        broker,
        "topics",
        "set-inactive-topic-policies",
        TOPIC,
        "-d",
        "-t",
        "10m",
        "-m",
        "delete_when_no_subscriptions",
    )
    own = {"inactiveTopicDeleteMode": "delete_when_no_subscriptions", "maxInactiveDurationSeconds": 600}
    assert as_json(broker, "topics", "get-inactive-topic-policies", TOPIC) == {
        **own,
        "deleteWhileInactive": False,
    }
    ok(broker, "topics", "remove-inactive-topic-policies", TOPIC)
    assert as_json(broker, "topics", "get-inactive-topic-policies", TOPIC, "--applied") == POLICIES
    ok(broker, "namespaces", "remove-inactive-topic-policies", ns)
    applied = as_json(broker, "topics", "get-inactive-topic-policies", TOPIC, "--applied")
    assert applied["deleteWhileInactive"] is False  # the broker's default
    neither = admin(
        broker,
        "namespaces",
        "set-inactive-topic-policies",
        ns,
        "-t",
        "1h",
        "-m",
        "delete_when_no_subscriptions",
    )
    assert neither.returncode != 0 and "Traceback" not in neither.stderr
