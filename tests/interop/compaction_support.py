"""What the compaction interop tests share: the admin paths of a topic's compaction, running one to
its end, and reading a reader to the end of what is stored."""

from __future__ import annotations

from tests.interop.support import admin_call
from tests.waiting import eventually


def topic_path(topic: str) -> str:
    """``/admin/v2/persistent/{tenant}/{ns}/{topic}`` of a full topic name."""
    return "/admin/v2/" + topic.replace("://", "/")


def compaction_path(topic: str) -> str:
    return topic_path(topic) + "/compaction"


def compaction_over(broker, topic: str) -> dict:
    """The compaction status once it is not RUNNING (a run started must have ended)."""

    def over():
        status, body = admin_call(broker, "GET", compaction_path(topic))
        assert status == 200 and body["status"] in ("SUCCESS", "ERROR"), body
        return body

    return eventually(over, what="the compaction to end")


def compact(broker, topic: str) -> None:
    """Compact ``topic`` by the admin API and wait until it succeeded."""
    status, body = admin_call(broker, "PUT", compaction_path(topic))
    assert status == 204, body
    assert compaction_over(broker, topic)["status"] == "SUCCESS"


def read_all(reader) -> list:
    """Every message the reader has until the end of what is stored now."""
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=5000))
    return out
