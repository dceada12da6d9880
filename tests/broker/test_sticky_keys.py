"""Key_Shared's pure parts: key choice, Pulsar's hash, and both selectors."""

import pytest

from magnetar.broker.dispatchers.delayed import DelayedDeliveryTracker
from magnetar.broker.dispatchers.sticky_keys import (
    NONE_KEY,
    RANGE_SIZE,
    AutoSplitSelector,
    RangeConflict,
    StickySelector,
    sticky_key,
    sticky_key_hash,
)
from magnetar.protocol import wire
from magnetar.storage.position import Position


def meta(**fields) -> wire.MessageMetadata:
    return wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0, **fields)


def test_ordering_key_wins_then_partition_key_then_none():
    assert sticky_key(meta(ordering_key=b"o", partition_key="p")) == b"o"
    assert sticky_key(meta(partition_key="p")) == b"p"
    assert sticky_key(meta(partition_key="aGk=", partition_key_b64_encoded=True)) == b"hi"
    assert sticky_key(meta()) == NONE_KEY
    assert sticky_key(None) == NONE_KEY


def test_hash_is_standard_murmur3_masked_positive_modulo_65536():
    # Murmur3 x86_32, seed 0, of this sentence is 0x2e4ff723 (the reference test vector).
    assert (
        sticky_key_hash(b"The quick brown fox jumps over the lazy dog") == (0x2E4FF723 & 0x7FFFFFFF) % 65536
    )
    assert sticky_key_hash(b"") == 0
    assert all(0 <= sticky_key_hash(b"k%d" % i) < RANGE_SIZE for i in range(1000))


class Named:
    """A stand-in consumer: selectors compare consumers by identity."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


a, b, c = Named("a"), Named("b"), Named("c")


def test_auto_split_covers_every_hash_and_splits_the_largest_range():
    selector = AutoSplitSelector()
    assert selector.select(5) is None
    selector.add(a)
    assert {selector.select(h) for h in (0, 40000, 65535)} == {a}
    selector.add(b)
    assert selector.ranges() == [(0, 32767, a), (32768, 65535, b)]
    selector.add(c)  # splits a's range (the first of two equal ones)
    assert selector.ranges() == [(0, 16383, a), (16384, 32767, c), (32768, 65535, b)]
    selector.remove(c)
    assert selector.ranges() == [(0, 32767, a), (32768, 65535, b)]
    selector.remove(b)
    assert selector.ranges() == [(0, 65535, a)]
    selector.remove(a)
    assert selector.ranges() == []


def test_sticky_ranges_are_validated_and_leave_gaps_unowned():
    selector = StickySelector()
    selector.add(a, [(0, 99), (200, 299)])
    selector.add(b, [(100, 150)])
    assert [selector.select(h) for h in (0, 99, 100, 150, 151, 250, 300)] == [a, a, b, b, None, a, None]
    with pytest.raises(RangeConflict, match="overlaps"):
        selector.add(c, [(150, 160)])
    with pytest.raises(RangeConflict, match="outside"):
        selector.add(c, [(65000, 70000)])
    with pytest.raises(RangeConflict, match="overlap"):
        selector.add(c, [(400, 500), (450, 460)])
    with pytest.raises(RangeConflict, match="declare"):
        selector.add(c, [])
    selector.remove(a)
    assert selector.select(50) is None


def test_delayed_tracker_releases_in_time_order():
    tracker = DelayedDeliveryTracker()
    tracker.add(Position(1, 2), 300)
    tracker.add(Position(1, 1), 100)
    tracker.add(Position(1, 3), 200)
    tracker.discard(Position(1, 3))
    assert tracker.next_time() == 100
    assert tracker.pop_due(250) == [Position(1, 1)]
    assert tracker.next_time() == 300
    assert tracker.pop_due(1000) == [Position(1, 2)]
    assert len(tracker) == 0 and tracker.next_time() is None


def test_auto_split_first_range_goes_up_when_its_owner_leaves():
    selector = AutoSplitSelector()
    for consumer in (a, b, c):
        selector.add(consumer)
    selector.remove(a)
    assert selector.ranges()[0][0] == 0 and selector.ranges()[-1][1] == 65535
    assert [r[2] for r in selector.ranges()] == [c, b]
