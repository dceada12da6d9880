"""The keepalive wheel (keepalive.py): every connection looked at once per interval, a slot per turn."""

from __future__ import annotations

from magnetar.broker.keepalive import SLOTS, KeepaliveWheel


class Seen:
    def __init__(self) -> None:
        self.ticks: list[float] = []

    def keepalive_tick(self, now: float) -> None:
        self.ticks.append(now)


def test_each_connection_is_looked_at_once_per_interval_a_slot_at_a_time():
    wheel = KeepaliveWheel(32.0)
    assert wheel.enabled and wheel.turn_seconds == 32.0 / SLOTS
    connections = [Seen() for _ in range(5 * SLOTS + 3)]
    slots = [wheel.add(c) for c in connections]
    assert len(wheel) == len(connections)
    for turn in range(2 * SLOTS):
        wheel.turn(float(turn))
    assert all(len(c.ticks) == 2 for c in connections)  # two intervals: looked at twice
    assert all(c.ticks[1] - c.ticks[0] == SLOTS for c in connections)  # an interval apart
    per_turn = [sum(1 for c in connections if c.ticks[0] == t) for t in range(SLOTS)]
    assert max(per_turn) - min(per_turn) <= 1  # spread evenly over the turns
    wheel.remove(connections[0], slots[0])
    for turn in range(SLOTS):
        wheel.turn(100.0 + turn)
    assert len(connections[0].ticks) == 2 and all(len(c.ticks) == 3 for c in connections[1:])


def test_a_connection_that_closes_itself_during_a_turn_does_not_upset_it():
    wheel = KeepaliveWheel(1.0)

    class Closing(Seen):
        def keepalive_tick(self, now: float) -> None:
            super().keepalive_tick(now)
            wheel.remove(self, self.slot)

    a, b = Closing(), Closing()
    a.slot = wheel.add(a)
    b.slot = wheel.add(b)
    for turn in range(SLOTS):
        wheel.turn(float(turn))
    assert len(a.ticks) == len(b.ticks) == 1 and len(wheel) == 0


def test_an_interval_of_zero_turns_the_wheel_off():
    assert not KeepaliveWheel(0).enabled
