"""NamespaceService: a topic's bundle, its owner among workers sharing a store, unload and split
(no network: two services over one SQLite file stand for two workers)."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.bundles import NamespaceBundle
from magnetar.broker.namespace_service import NamespaceService, ServiceUnitNotReady, choose_owner
from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.ownership import BrokerInfo, LocalOwnership
from magnetar.broker.ownership_sqlite import SqliteOwnership
from magnetar.protocol.topic_name import TopicName


class MemoryKV:
    """The metadata store's key/value calls, in memory (shared by the two workers' registries)."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}

    def get(self, key):
        return self.rows.get(key)

    def put(self, key, value):
        self.rows[key] = value

    def delete(self, key):
        self.rows.pop(key, None)

    def keys(self, prefix=""):
        return sorted(k for k in self.rows if k.startswith(prefix))


@pytest.fixture
def workers(tmp_path):
    kv = MemoryKV()
    unloaded: list[list[NamespaceBundle]] = [[], []]
    services = []
    for n in range(2):
        store = SqliteOwnership(tmp_path / "ownership.sqlite")
        registry = NamespaceRegistry(kv)
        registry.changed = store.publish_change
        service = NamespaceService(registry, store, lambda b, n=n: unloaded[n].append(b) or 0)
        service.register(BrokerInfo(f"w{n}", f"pulsar://127.0.0.1:{7000 + n}"))
        services.append(service)
    yield services, unloaded
    for service in services:
        service.store.close()


def topics(count):
    return [TopicName.parse(f"persistent://public/default/t-{i}") for i in range(count)]


def test_the_four_bundles_of_public_default_spread_over_both_workers(workers):
    (one, two), _ = workers
    owners = {one.lookup(t).broker_id for t in topics(40)}
    assert owners == {"w0", "w1"}
    assert sorted(one.store.bundle_counts().values()) == [2, 2]
    for topic in topics(40):
        assert one.lookup(topic) == two.lookup(topic)


def test_only_the_owner_serves_a_topic(workers):
    (one, two), _ = workers
    topic = topics(1)[0]
    owner, other = (one, two) if one.is_served_here(topic) else (two, one)
    owner.check_served_here(topic)
    with pytest.raises(
        ServiceUnitNotReady, match=r"not served by this instance:w\d\. Please redo the lookup"
    ):
        other.check_served_here(topic)


def test_unload_frees_the_bundle_and_closes_its_topics_on_the_owner(workers):
    (one, two), unloaded = workers
    topic = topics(1)[0]
    bundle = one.bundle_of(topic)
    owner = one if one.lookup(topic).broker_id == "w0" else two
    asyncio.run(owner.unload(bundle))
    assert unloaded[int(owner.broker_id[1])] == [bundle]
    assert one.store.owner(str(bundle)) is None
    assert one.lookup(topic) == two.lookup(topic)  # owned again, by whoever is least loaded


def test_while_its_topics_close_off_the_loop_an_unloading_bundle_is_still_owned_but_serves_nobody(tmp_path):
    store = SqliteOwnership(tmp_path / "ownership.sqlite")
    closes_begun, closes_done = asyncio.Event(), asyncio.Event()
    seen: list[tuple[str | None, bool]] = []

    async def close_topics(bundle: NamespaceBundle) -> int:
        closes_begun.set()
        await closes_done.wait()
        return 3

    service = NamespaceService(NamespaceRegistry(MemoryKV()), store, lambda b: 0, close_topics)
    service.register(BrokerInfo("w0", "pulsar://127.0.0.1:7000"))
    topic = topics(1)[0]
    bundle = service.bundle_of(topic)
    service.check_served_here(topic)

    async def scenario() -> int:
        unload = asyncio.ensure_future(service.unload(bundle))
        await closes_begun.wait()
        owner = store.owner(str(bundle))
        try:
            service.check_served_here(topic)
            refused = False
        except ServiceUnitNotReady:
            refused = True
        seen.append((owner.broker_id if owner else None, refused))
        closes_done.set()
        return await unload

    try:
        assert asyncio.run(scenario()) == 3
        assert seen == [("w0", True)]  # the next owner cannot have it before the closes are done
        assert store.owner(str(bundle)) is None  # released once they are
        service.check_served_here(topic)  # served again (here, the only broker) after its next lookup
    finally:
        store.close()


def test_a_split_keeps_both_halves_with_the_owner_and_every_worker_sees_the_new_bundles(workers):
    (one, two), _ = workers
    topic = topics(1)[0]
    bundle = one.bundle_of(topic)
    owner = one.lookup(topic)
    low, high = two.split(bundle)
    assert one.store.owner(str(low)) == owner and one.store.owner(str(high)) == owner
    two_version = one._version
    one.poll_changes(lambda ns: None)  # the other worker's cached policies are dropped
    assert one._version > two_version
    assert len(one.bundles("public/default")) == 5
    assert one.bundle_of(topic) in (low, high)


def test_a_policy_change_reaches_the_other_worker(workers):
    (one, two), _ = workers
    one.namespaces.policies("public/default")  # cached
    two.namespaces.update_policy("public/default", message_ttl_seconds=60)
    heard: list[str] = []
    one.poll_changes(heard.append)
    assert heard == ["public/default"]
    assert one.namespaces.policies("public/default").message_ttl_seconds == 60


def test_an_unloaded_bundle_tells_every_worker_once_and_policies_still_arrive(workers):
    (one, two), _ = workers
    topic = topics(1)[0]
    owner = one.lookup(topic)
    mover = one if owner.broker_id == "w0" else two
    moved: list[str] = []
    two.poll_changes(lambda ns: None, bundles_moved=lambda: moved.append("before"))
    assert moved == []  # nothing moved yet
    asyncio.run(mover.unload(mover.bundle_of(topic)))
    one.namespaces.update_policy("public/default", message_ttl_seconds=30)
    heard: list[str] = []
    two.poll_changes(heard.append, bundles_moved=lambda: moved.append("unload"))
    assert moved == ["unload"] and heard == ["public/default"]
    two.poll_changes(heard.append, bundles_moved=lambda: moved.append("again"))
    assert moved == ["unload"]


def test_an_expired_session_unloads_everything_and_joins_again(tmp_path):
    now = [0.0]
    store = SqliteOwnership(tmp_path / "o.sqlite", lease_seconds=5, clock=lambda: now[0])
    unloaded: list[NamespaceBundle] = []
    service = NamespaceService(NamespaceRegistry(MemoryKV()), store, lambda b: unloaded.append(b) or 0)
    service.register(BrokerInfo("w0", "pulsar://x:1"))
    service.lookup(topics(1)[0])
    now[0] = 10
    service.keep_alive()
    assert len(unloaded) == 4  # public/default's bundles
    assert [b.broker_id for b in store.brokers()] == ["w0"]
    store.close()


def test_alone_the_broker_owns_every_bundle():
    service = NamespaceService(NamespaceRegistry(MemoryKV()), LocalOwnership(), lambda b: 0)
    service.register(BrokerInfo("me", "pulsar://x:1"))
    for topic in topics(10):
        service.check_served_here(topic)


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.integers(0, 9), min_size=1), st.text())
def test_a_new_bundle_goes_to_a_least_loaded_broker(counts, bundle):
    chosen = choose_owner(counts, bundle)
    assert counts[chosen] == min(counts.values())
    assert choose_owner(dict(reversed(list(counts.items()))), bundle) == chosen
