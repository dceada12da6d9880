"""Keyed messages on a partitioned topic: our client puts each key on the partition the official
client (pulsar-client 3.13, its default producer) puts it on.

Where each message landed is read back from every partition with the official client's readers,
so neither producer's own message ids are trusted. magnetar.protocol.key_hash has the schemes;
tests/protocol/test_key_hash.py their values.
"""

from __future__ import annotations

import json
import urllib.request

import pulsar
import pytest

from magnetar.client import InvalidConfiguration
from magnetar.protocol.key_hash import HashingScheme, key_partition
from magnetar.protocol.topic_name import partition_name

from ..interop.support import read_until_marker

pytestmark = pytest.mark.interop

PARTITIONS = 7
KEYS = [f"key-{i}" for i in range(900)] + [f"ключ-{i}" for i in range(50)] + [f"😀{i}x" for i in range(50)]


def _make_partitioned(broker, topic: str, partitions: int) -> None:
    path = topic.replace("persistent://", "")
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/{path}/partitions",
        data=json.dumps(partitions).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 204


def _produce(producer, tag: str, keys: list[str]) -> None:
    failures = []
    for key in keys:
        producer.send_async(
            f"{tag}|{key}".encode(),
            lambda result, _id: result == pulsar.Result.Ok or failures.append(result),
            partition_key=key,
        )
    producer.flush()
    assert not failures, failures[:5]


def _placements(official, topic: str, partitions: int) -> dict[str, dict[str, int]]:
    """``{tag: {key: partition}}`` of every message on the topic, read partition by partition."""
    placed: dict[str, dict[str, int]] = {}
    for index in range(partitions):
        partition = partition_name(topic, index)
        reader = official.create_reader(partition, pulsar.MessageId.earliest)
        # A marker, not has_message_available: the official reader of a partition gets message ids
        # without the partition index, the broker's last message id has it, and the reader always
        # finds the broker's id the greater.
        marker = official.create_producer(partition, batching_enabled=False)
        for msg in read_until_marker(reader, marker):
            tag, key = msg.data().decode().split("|", 1)
            assert msg.partition_key() == key
            assert key not in placed.setdefault(tag, {}), f"{tag} sent {key} twice"
            placed[tag][key] = index
        reader.close()
    return placed


def test_keys_land_where_the_official_client_puts_them(broker, client_factory, magnetar_client, topic):
    _make_partitioned(broker, topic, PARTITIONS)
    official = client_factory(broker.service_url)
    _produce(official.create_producer(topic), "official", KEYS)
    _produce(magnetar_client.create_producer(topic), "ours", KEYS)

    placed = _placements(official, topic, PARTITIONS)
    assert len(placed["official"]) == len(placed["ours"]) == len(KEYS)
    differ = {
        k: (placed["official"][k], placed["ours"][k])
        for k in KEYS
        if placed["official"][k] != placed["ours"][k]
    }
    assert not differ, f"{len(differ)} keys on another partition (official, ours): {list(differ.items())[:5]}"
    # Both agree with the function, and it spreads the keys over every partition.
    assert all(placed["official"][k] == key_partition(k, PARTITIONS) for k in KEYS)
    assert set(placed["ours"].values()) == set(range(PARTITIONS))


@pytest.mark.parametrize("scheme", ["JavaStringHash", HashingScheme.Murmur3_32Hash])
def test_hashing_scheme_picks_the_partition(broker, client_factory, magnetar_client, topic, scheme):
    _make_partitioned(broker, topic, PARTITIONS)
    producer = magnetar_client.create_producer(topic, hashing_scheme=scheme)
    keys = KEYS[:200]
    ids = {key: producer.send(f"ours|{key}".encode(), partition_key=key) for key in keys}
    placed = _placements(client_factory(broker.service_url), topic, PARTITIONS)["ours"]
    assert placed == {k: key_partition(k, PARTITIONS, scheme) for k in keys}
    assert all(ids[k].partition() == placed[k] for k in keys)
    # Not the default's placement: the option is not ignored.
    assert placed != {k: key_partition(k, PARTITIONS) for k in keys}


def test_an_unknown_hashing_scheme_is_refused_by_name(broker, magnetar_client, topic):
    _make_partitioned(broker, topic, 3)
    with pytest.raises(InvalidConfiguration, match=r"hashing_scheme 'Crc32'.*JavaStringHash"):
        magnetar_client.create_producer(topic, hashing_scheme="Crc32")
