"""The flow-control rules on their own: when a connection stops being read and when it is read again."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.flow_control import Hold, PendingSends, PublishBuffer, ReadHolds, no_holds


class Transport:
    """Records pause/resume calls, as the connection's transport would see them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def holds(self) -> ReadHolds:
        return ReadHolds(lambda: self.calls.append("pause"), lambda: self.calls.append("resume"))


def test_reading_pauses_at_the_first_reason_and_resumes_only_when_none_is_left():
    transport = Transport()
    holds = transport.holds()
    assert holds.held == 0
    holds.hold(Hold.SENDS)
    holds.hold(Hold.WRITES)
    holds.hold(Hold.SENDS)  # already held for this reason: nothing new
    assert transport.calls == ["pause"]
    assert holds.held == Hold.SENDS | Hold.WRITES
    holds.release(Hold.SENDS)
    assert transport.calls == ["pause"] and holds.held == Hold.WRITES  # still held for WRITES
    holds.release(Hold.BROKER)  # never held for it: nothing
    holds.release(Hold.WRITES)
    assert transport.calls == ["pause", "resume"] and holds.held == 0
    holds.release(Hold.WRITES)
    assert transport.calls == ["pause", "resume"]
    assert holds.times == {Hold.WRITES: 1, Hold.SENDS: 1, Hold.BROKER: 0, Hold.FRAMES: 0}


def test_hold_counts_go_to_a_shared_dict():
    shared = no_holds()
    for _ in range(3):
        holds = ReadHolds(lambda: None, lambda: None, shared)
        holds.hold(Hold.BROKER)
        holds.release(Hold.BROKER)
        holds.hold(Hold.BROKER)
    assert shared == {Hold.WRITES: 0, Hold.SENDS: 0, Hold.BROKER: 6, Hold.FRAMES: 0}


def test_pending_sends_are_full_at_the_limit_and_have_room_again_at_half():
    pending = PendingSends(4)
    assert [pending.add() for _ in range(5)] == [False, False, False, True, True]
    assert [pending.remove() for _ in range(5)] == [False, False, True, True, True]
    assert pending.count == 0


def test_no_pending_limit_never_holds():
    pending = PendingSends(0)
    assert not any(pending.add() for _ in range(100_000))


def test_the_publish_buffer_is_full_above_its_limit_and_has_room_at_half():
    events: list[str] = []
    buffer = PublishBuffer(1000, lambda: events.append("full"), lambda: events.append("room"))
    buffer.add(600)
    buffer.add(400)  # at the limit, not above it
    assert events == [] and not buffer.full
    buffer.add(1)
    buffer.add(5000)  # already full: reported once
    assert events == ["full"] and buffer.full and buffer.bytes == 6001
    buffer.remove(5000)
    buffer.remove(500)
    assert events == ["full"]  # 501 left: above half
    buffer.remove(1)
    assert events == ["full", "room"] and not buffer.full and buffer.bytes == 500
    buffer.add(600)
    assert events == ["full", "room", "full"] and buffer.times_full == 2


def test_no_publish_buffer_limit_is_never_full():
    buffer = PublishBuffer(0, lambda: pytest.fail("full"), lambda: pytest.fail("room"))
    buffer.add(10**12)
    buffer.remove(10**12)
    assert buffer.times_full == 0


@pytest.mark.parametrize(
    "setting", ["max_pending_publish_requests_per_connection", "max_message_publish_buffer_bytes"]
)
def test_negative_limits_are_refused(setting):
    with pytest.raises(ValueError, match=setting):
        BrokerConfig.load(**{setting: -1})
