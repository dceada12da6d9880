"""The schema registry shared by workers: two registries over one metadata file stand for two
workers (the partitions of one topic, on different workers, share its schema). Two schemas added
at once never get the same version, and a worker that cached a topic's versions hears of a new
one through the ownership store's change notices."""

from __future__ import annotations

import pytest

from magnetar.broker.namespace_service import NamespaceService
from magnetar.broker.namespaces import NamespaceRegistry
from magnetar.broker.ownership_sqlite import SqliteOwnership
from magnetar.broker.schemas.registry import SchemaRegistry
from magnetar.storage.metadata_store import MetadataStore

from .test_schema_registry import TOPIC, user

EVOLVED = user({"name": "email", "type": ["null", "string"], "default": None})
OTHER = user({"name": "age", "type": "int", "default": 0})


@pytest.fixture
def two_workers(tmp_path):
    stores = [MetadataStore(tmp_path / "metadata.sqlite") for _ in range(2)]
    yield [SchemaRegistry(store, NamespaceRegistry(store)) for store in stores]
    for store in stores:
        store.close()


def test_two_workers_adding_schemas_at_once_never_share_a_version(two_workers):
    first, second = two_workers
    assert first.add(TOPIC, user()) == 0
    assert [s.version for s in second.history(TOPIC)] == [0]  # cached: it will not see version 1
    assert first.add(TOPIC, EVOLVED) == 1
    assert second.add(TOPIC, OTHER) == 2, "version 1 was taken: the next one, checked against it"
    assert second.add(TOPIC, EVOLVED) == 1, "found again once read afresh"
    for registry in two_workers:
        registry.forget()
        stored = registry.history(TOPIC)
        assert [s.version for s in stored] == [0, 1, 2]
        assert stored[1].schema.same_as(EVOLVED) and stored[2].schema.same_as(OTHER)


def test_a_worker_hears_of_a_schema_another_added(two_workers, tmp_path):
    first, second = two_workers
    ownership = [SqliteOwnership.in_data_dir(tmp_path) for _ in range(2)]
    metadata = MetadataStore(tmp_path / "metadata.sqlite")
    try:
        first.changed = ownership[0].publish_change
        listening = NamespaceService(NamespaceRegistry(metadata), ownership[1], lambda bundle: 0)
        first.add(TOPIC, user())
        listening.poll_changes(lambda namespace: None, second.forget)
        assert second.get(TOPIC).version == 0  # now cached by the second worker
        first.add(TOPIC, EVOLVED)
        assert second.get(TOPIC).version == 0
        listening.poll_changes(lambda namespace: None, second.forget)
        assert second.get(TOPIC).version == 1
        first.delete(TOPIC)
        listening.poll_changes(lambda namespace: None, second.forget)
        assert second.get(TOPIC) is None
    finally:
        metadata.close()
        for one in ownership:
            one.close()
