"""Which loaded topics nobody uses, and when they are unloaded (inactive_topics.py), without a
broker: topics are stand-ins with what the sweep looks at."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from magnetar.broker.inactive_topic_policies import CAUGHT_UP, NO_SUBSCRIPTIONS, InactiveTopicPolicies
from magnetar.broker.inactive_topics import InactiveTopics, deletable, in_use
from magnetar.broker.topic_slices import SLICE
from magnetar.protocol.topic_name import TopicName


@dataclass
class Dispatcher:
    detached: dict = field(default_factory=dict)


@dataclass
class Subscription:
    consumers: list = field(default_factory=list)
    dispatcher: Dispatcher | None = None


@dataclass
class Topic:
    name: TopicName
    producers: dict = field(default_factory=dict)
    replicators: dict = field(default_factory=dict)
    subscriptions: dict = field(default_factory=dict)
    busy: bool = False


def topic(n: int, **kw) -> Topic:
    return Topic(TopicName.parse(f"persistent://public/default/t{n}"), **kw)


def test_what_keeps_a_topic_in_use():
    assert not in_use(topic(0))
    assert not in_use(topic(0, subscriptions={"durable": Subscription()}))  # a place alone is no use
    assert in_use(topic(0, producers={1: object()}))
    assert in_use(topic(0, replicators={"remote": object()}))
    assert in_use(topic(0, subscriptions={"s": Subscription(consumers=[object()])}))
    assert in_use(topic(0, subscriptions={"s": Subscription(dispatcher=Dispatcher({"c": object()}))}))
    assert not in_use(topic(0, subscriptions={"s": Subscription(dispatcher=Dispatcher())}))
    assert in_use(topic(0, busy=True))


def test_a_topic_is_unloaded_once_unused_for_the_whole_duration():
    tracker = InactiveTopics()
    idle, used = topic(1), topic(2, producers={1: object()})
    topics = {str(t.name): t for t in (idle, used)}
    unloaded: list = []
    told: list = []

    def sweep(now: float) -> int:
        return tracker.sweep(topics, now, 10.0, unloaded.append, lambda: told.append(now))

    assert sweep(100.0) == 0  # first seen: counted as just used
    assert sweep(109.0) == 0
    used.producers.clear()  # from now on the second one is idle too
    assert sweep(110.0) == 1 and unloaded == [idle] and told == [110.0]
    del topics[str(idle.name)]
    assert sweep(118.0) == 0  # last seen in use at 109
    assert sweep(119.0) == 1 and unloaded == [idle, used] and told == [110.0, 119.0]
    assert tracker.unloaded == 2


def test_use_between_sweeps_starts_the_count_again_and_zero_never_unloads():
    tracker = InactiveTopics()
    t = topic(3)
    topics = {str(t.name): t}
    unloaded: list = []
    assert tracker.sweep(topics, 0.0, 10.0, unloaded.append, lambda: None) == 0
    t.busy = True
    tracker.sweep(topics, 8.0, 10.0, unloaded.append, lambda: None)
    t.busy = False
    assert tracker.sweep(topics, 17.0, 10.0, unloaded.append, lambda: None) == 0
    assert tracker.sweep(topics, 18.0, 10.0, unloaded.append, lambda: None) == 1
    t2 = topic(4)
    assert tracker.sweep({str(t2.name): t2}, 0.0, 0.0, unloaded.append, lambda: None) == 0
    assert tracker.sweep({str(t2.name): t2}, 1e9, 0.0, unloaded.append, lambda: None) == 0


# -- inactive-topic policies ---------------------------------------------------------------------------


class Cursor:
    def __init__(self, backlog: int) -> None:
        self._backlog = backlog

    def backlog(self) -> int:
        return self._backlog


@dataclass
class DurableSubscription:
    cursor: Cursor
    consumers: list = field(default_factory=list)
    dispatcher: None = None


@dataclass
class StoredTopic(Topic):
    ml: object = field(default_factory=object)
    replication_cursors: dict = field(default_factory=dict)


def stored(n: int, **kw) -> StoredTopic:
    return StoredTopic(TopicName.parse(f"persistent://public/default/s{n}"), **kw)


def test_the_policies_json_is_pulsars_and_checked():
    policies = InactiveTopicPolicies.from_json(
        {"inactiveTopicDeleteMode": CAUGHT_UP, "maxInactiveDurationSeconds": 600, "deleteWhileInactive": True}
    )
    assert policies == InactiveTopicPolicies(CAUGHT_UP, 600.0, True)
    assert policies.to_json() == {
        "inactiveTopicDeleteMode": CAUGHT_UP,
        "maxInactiveDurationSeconds": 600,
        "deleteWhileInactive": True,
    }
    assert InactiveTopicPolicies.from_json({}) == InactiveTopicPolicies(NO_SUBSCRIPTIONS, 60.0, False)
    for bad in (
        [],
        {"inactiveTopicDeleteMode": "always"},
        {"maxInactiveDurationSeconds": 0},
        {"maxInactiveDurationSeconds": True},
        {"deleteWhileInactive": "yes"},
    ):
        with pytest.raises(ValueError):
            InactiveTopicPolicies.from_json(bad)


def test_no_mode_deletes_a_topic_with_a_backlog():
    empty = stored(0)
    caught_up = stored(1, subscriptions={"s": DurableSubscription(Cursor(0))})
    behind = stored(2, subscriptions={"s": DurableSubscription(Cursor(3))})
    replicated = stored(3, replication_cursors={"remote": object()})
    assert deletable(empty, NO_SUBSCRIPTIONS) and deletable(empty, CAUGHT_UP)
    assert not deletable(caught_up, NO_SUBSCRIPTIONS) and deletable(caught_up, CAUGHT_UP)
    assert not deletable(behind, NO_SUBSCRIPTIONS) and not deletable(behind, CAUGHT_UP)
    assert not deletable(replicated, NO_SUBSCRIPTIONS)
    nonpersistent = stored(4, ml=None)
    assert not deletable(nonpersistent, NO_SUBSCRIPTIONS)


def test_a_deletable_topic_waits_loaded_for_its_duration_and_the_others_are_unloaded():
    tracker = InactiveTopics()
    empty, behind = stored(0), stored(1, subscriptions={"s": DurableSubscription(Cursor(3))})
    topics = {str(t.name): t for t in (empty, behind)}
    policy = InactiveTopicPolicies(NO_SUBSCRIPTIONS, 30.0, True)
    unloaded: list = []
    deleted: list = []

    def sweep(now: float) -> int:
        return tracker.sweep(
            topics, now, 10.0, unloaded.append, lambda: None, lambda t: policy, deleted.append
        )

    sweep(0.0)
    assert sweep(10.0) == 1 and unloaded == [behind] and deleted == []  # the empty one waits, loaded
    del topics[str(behind.name)]
    assert sweep(29.0) == 0
    assert sweep(30.0) == 1 and deleted == [empty] and (tracker.unloaded, tracker.deleted) == (1, 1)


# -- a sweep in slices -----------------------------------------------------------------------------


def test_a_sweep_goes_a_slice_at_a_time_and_leaves_out_topics_unloaded_meanwhile():
    tracker = InactiveTopics()
    topics = {str(t.name): t for t in (topic(i) for i in range(2 * SLICE + 1))}
    unloaded: list = []
    told: list = []
    assert tracker.sweep(topics, 0.0, 10.0, unloaded.append, lambda: None) == 0  # all first seen
    steps = tracker.sweeping(topics, lambda: 10.0, 10.0, unloaded.append, lambda: told.append(1))
    next(steps)
    assert len(unloaded) == SLICE and told == []  # one slice, and the loop runs before the next
    for t in unloaded:
        del topics[str(t.name)]  # as the loader does
    last = topic(2 * SLICE)
    del topics[str(last.name)]  # gone meanwhile (a bundle's unload): not looked at
    assert list(steps) == [None, None]  # the second slice, and the third's one topic left out
    assert len(unloaded) == 2 * SLICE and last.name not in {t.name for t in unloaded}
    assert told == [1] and tracker.unloaded == 2 * SLICE
