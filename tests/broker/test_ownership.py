"""Bundle ownership shared by processes: two stores on one file stand for two workers."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.ownership import SPREAD_CHANGE, BrokerInfo, LocalOwnership
from magnetar.broker.ownership_sqlite import SqliteOwnership

BUNDLE = "public/default/0x00000000_0x40000000"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def broker(n: int) -> BrokerInfo:
    return BrokerInfo(f"worker-{n}", f"pulsar://127.0.0.1:{7000 + n}", None, f"http://127.0.0.1:{8000 + n}")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def stores(tmp_path, clock):
    opened = [SqliteOwnership(tmp_path / "ownership.sqlite", lease_seconds=10, clock=clock) for _ in range(2)]
    yield opened
    for store in opened:
        store.close()


def test_the_first_assignment_wins_and_every_worker_sees_it(stores):
    one, two = stores
    one.register(broker(0))
    two.register(broker(1))
    assert one.assign(BUNDLE, "worker-0") == broker(0)
    assert two.assign(BUNDLE, "worker-1") == broker(0)
    assert two.owner(BUNDLE) == broker(0)
    assert one.owned("worker-0") == [BUNDLE]
    assert two.bundle_counts() == {"worker-0": 1, "worker-1": 0}


def test_an_expired_lease_owns_nothing_and_its_bundles_go_to_the_next(stores, clock):
    one, two = stores
    one.register(broker(0))
    two.register(broker(1))
    one.assign(BUNDLE, "worker-0")
    clock.now += 5
    assert two.renew("worker-1")
    clock.now += 6  # worker-0 renewed 11 s ago: gone
    assert two.owner(BUNDLE) is None
    assert [b.broker_id for b in two.brokers()] == ["worker-1"]
    assert two.assign(BUNDLE, "worker-1") == broker(1)
    assert not one.renew("worker-0")


def test_unregister_frees_the_bundles_at_once(stores):
    one, two = stores
    one.register(broker(0))
    two.register(broker(1))
    one.assign(BUNDLE, "worker-0")
    two.unregister("worker-0")  # the supervisor saw worker-0 die
    assert one.owner(BUNDLE) is None
    assert two.assign(BUNDLE, "worker-1") == broker(1)


def test_a_bundle_is_not_given_to_a_broker_without_a_session(stores):
    with pytest.raises(LookupError):
        stores[0].assign(BUNDLE, "worker-9")


def test_release_is_only_by_the_owner(stores):
    one, two = stores
    one.register(broker(0))
    two.register(broker(1))
    one.assign(BUNDLE, "worker-0")
    assert not two.release(BUNDLE, "worker-1")
    assert one.release(BUNDLE, "worker-0")
    assert two.owner(BUNDLE) is None


def test_release_all_of_a_namespace(stores):
    one, _ = stores
    one.register(broker(0))
    one.assign("t/a/0x00000000_0xffffffff", "worker-0")
    one.assign("t/ab/0x00000000_0xffffffff", "worker-0")
    one.release_all("t/a/")
    assert one.owned("worker-0") == ["t/ab/0x00000000_0xffffffff"]


def test_a_change_published_by_one_reaches_the_other(stores):
    one, two = stores
    start, _ = two.changes_since(0)
    one.publish_change("namespace/public/default")
    version, paths = two.changes_since(start)
    assert paths == ["namespace/public/default"]
    assert two.changes_since(version) == (version, [])


def test_a_topic_marked_spread_is_told_to_every_worker_once(stores):
    one, two = stores
    start, _ = two.changes_since(0)
    topic = "persistent://public/default/alerts"
    assert one.mark_spread(topic)
    assert not two.mark_spread(topic)  # marked already: no second notice
    _, paths = two.changes_since(start)
    assert paths == [SPREAD_CHANGE]
    assert two.spread_topics() == {topic}
    assert LocalOwnership().spread_topics() == set() and not LocalOwnership().mark_spread(topic)


def test_a_subscriptions_resets_are_counted_for_every_worker(stores):
    one, two = stores
    topic = "persistent://public/default/alerts"
    assert two.resets(topic, "fans") == 0
    one.note_reset(topic, "fans")
    one.note_reset(topic, "fans")
    two.note_reset(topic, "other")
    assert two.resets(topic, "fans") == 2 and one.resets(topic, "other") == 1
    assert one.resets(topic + "-2", "fans") == 0
    alone = LocalOwnership()
    alone.note_reset(topic, "fans")
    assert alone.resets(topic, "fans") == 0  # nothing is spread: no follower to tell


def test_idle_links_are_seen_by_every_worker_and_go_with_their_session(stores):
    one, two = stores
    topic = "persistent://public/default/alerts"
    one.note_link_idle(topic, "fans", "worker-0", True)
    two.note_link_idle(topic, "fans", "worker-1", True)
    two.note_link_idle(topic, "fans", "worker-1", True)  # said twice: one note
    two.note_link_idle(topic, "other", "worker-1", True)
    assert one.idle_links(topic, "fans") == {"worker-0", "worker-1"}
    one.note_link_idle(topic, "fans", "worker-0", False)  # a consumer connected there again
    assert two.idle_links(topic, "fans") == {"worker-1"}
    one.unregister("worker-1")  # its links went with it
    assert two.idle_links(topic, "fans") == set() and two.idle_links(topic, "other") == set()
    alone = LocalOwnership()
    alone.note_link_idle(topic, "fans", "me", True)
    assert alone.idle_links(topic, "fans") == set()


def test_a_pinned_lookup_is_taken_once_per_pin_by_any_worker_until_it_runs_out(stores, clock):
    one, two = stores
    topic = "persistent://public/default/alerts"
    assert not two.take_pinned_lookup(topic, "10.0.0.1")
    one.pin_lookup(topic, "10.0.0.1", 60)
    one.pin_lookup(topic, "10.0.0.1", 60)  # two refusals: two lookups name the owner
    assert not two.take_pinned_lookup(topic, "10.0.0.2")  # another host
    assert not two.take_pinned_lookup(topic + "-2", "10.0.0.1")  # another topic
    assert two.take_pinned_lookup(topic, "10.0.0.1")
    assert one.take_pinned_lookup(topic, "10.0.0.1")
    assert not two.take_pinned_lookup(topic, "10.0.0.1")
    one.pin_lookup(topic, "10.0.0.1", 60)
    clock.now += 61  # the client gave up (or looked up elsewhere): the pin is gone
    assert not two.take_pinned_lookup(topic, "10.0.0.1")
    alone = LocalOwnership()
    alone.pin_lookup(topic, "10.0.0.1", 60)
    assert not alone.take_pinned_lookup(topic, "10.0.0.1")  # nothing is spread


def test_register_again_keeps_the_bundles_and_takes_the_new_urls(stores):
    one, two = stores
    one.register(broker(0))
    one.assign(BUNDLE, "worker-0")
    moved = BrokerInfo("worker-0", "pulsar://127.0.0.1:9999")
    one.register(moved)
    assert two.owner(BUNDLE) == moved


def test_non_persistent_topics_loaded_by_one_are_listed_by_the_other_while_its_session_lives(stores, clock):
    one, two = stores
    one.register(broker(0))
    two.register(broker(1))
    one.topic_loaded("worker-0", "non-persistent://public/default/a", True)
    two.topic_loaded("worker-1", "non-persistent://public/default/b", True)
    one.topic_loaded("worker-0", "non-persistent://public/other/c", True)
    assert two.loaded_topics("non-persistent://public/default/") == [
        "non-persistent://public/default/a",
        "non-persistent://public/default/b",
    ]
    two.topic_loaded("worker-1", "non-persistent://public/default/a", False)  # only its loader's goes
    one.topic_loaded("worker-0", "non-persistent://public/default/b", False)
    assert len(one.loaded_topics("non-persistent://public/default/")) == 2
    one.topic_loaded("worker-0", "non-persistent://public/default/a", False)
    assert two.loaded_topics("non-persistent://public/default/") == ["non-persistent://public/default/b"]
    clock.now += 5
    one.renew("worker-0")
    clock.now += 6  # worker-1's lease ran out: its topics are gone with it
    assert one.loaded_topics("non-persistent://public/") == ["non-persistent://public/other/c"]
    one.unregister("worker-0")
    one.register(broker(0))
    assert one.loaded_topics("non-persistent://") == []
    assert LocalOwnership().loaded_topics("non-persistent://") == []


def test_reset_forgets_a_previous_run(tmp_path):
    store = SqliteOwnership.in_data_dir(tmp_path)
    store.register(broker(0))
    store.assign(BUNDLE, "worker-0")
    store.mark_spread("persistent://public/default/alerts")
    store.note_reset("persistent://public/default/alerts", "fans")
    store.note_link_idle("persistent://public/default/alerts", "fans", "worker-1", True)
    store.topic_loaded("worker-0", "non-persistent://public/default/a", True)
    store.pin_lookup("persistent://public/default/alerts", "10.0.0.1", 60)
    store.close()
    SqliteOwnership.reset(tmp_path)
    again = SqliteOwnership.in_data_dir(tmp_path)
    assert again.brokers() == [] and again.spread_topics() == set()
    assert again.resets("persistent://public/default/alerts", "fans") == 0
    assert again.idle_links("persistent://public/default/alerts", "fans") == set()
    assert not again.take_pinned_lookup("persistent://public/default/alerts", "10.0.0.1")
    again.register(broker(0))
    assert again.owner(BUNDLE) is None and again.loaded_topics("non-persistent://") == []
    again.close()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 7)), max_size=30))
def test_whoever_asks_a_bundle_has_one_owner(tmp_path_factory, requests):
    path = tmp_path_factory.mktemp("own") / "ownership.sqlite"
    stores = [SqliteOwnership(path) for _ in range(2)]
    stores[0].register(broker(0))
    stores[1].register(broker(1))
    first: dict[int, str] = {}
    for asker, bundle in requests:
        got = stores[asker].assign(f"t/ns/{bundle}", f"worker-{asker}").broker_id
        assert got == first.setdefault(bundle, got)
    for store in stores:
        store.close()


def test_a_broker_alone_owns_everything():
    local = LocalOwnership()
    local.register(broker(0))
    assert local.assign(BUNDLE, "anyone") == broker(0)
    assert local.owner("x/y/0x00000000_0xffffffff") == broker(0)
