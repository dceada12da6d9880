"""Namespace bundles and lookups on Pulsar's admin paths, with one broker: the bundles of a
namespace, the bundle and owner of a topic, unloading a bundle under live clients of the
official client (they reconnect, nothing is lost), splitting one."""

from __future__ import annotations

import zlib

import pulsar
import pytest

from magnetar.client.admin import AdminClient

from .support import admin_call as call
from .support import receive_n

pytestmark = pytest.mark.interop


def test_public_default_has_pulsars_four_bundles(broker):
    assert call(broker, "GET", "/admin/v2/namespaces/public/default/bundles") == (
        200,
        {
            "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
            "numBundles": 4,
        },
    )
    assert call(broker, "GET", "/admin/v2/namespaces/public/nothing/bundles")[0] == 404


def test_a_namespace_is_made_with_the_bundles_asked_for(broker):
    admin = AdminClient(broker.http_url)
    admin.namespaces.create("public/eight", bundles=8)
    assert admin.namespaces.get_bundles("public/eight")["numBundles"] == 8
    status, _ = call(broker, "PUT", "/admin/v2/namespaces/public/bad", {"bundles": {"numBundles": 0}})
    assert status == 400


def test_the_lookup_names_this_broker_and_the_bundle_is_the_hash_of_the_full_name(broker, topic):
    admin = AdminClient(broker.http_url)
    assert admin.lookups.lookup_topic_data(topic) == {
        "brokerUrl": broker.service_url,
        "brokerUrlTls": None,
        "httpUrl": broker.http_url,
        "httpUrlTls": None,
        "nativeUrl": broker.service_url,
    }
    step = 0x40000000
    lower = zlib.crc32(topic.encode()) // step * step
    upper = min(lower + step, 0xFFFFFFFF)
    assert admin.lookups.get_bundle_range(topic) == f"0x{lower:08x}_0x{upper:08x}"


def test_unloading_a_bundle_moves_its_clients_and_loses_nothing(broker, client, topic):
    admin = AdminClient(broker.http_url)
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    for i in range(20):
        producer.send(f"before-{i}".encode())
    bundle = admin.lookups.get_bundle_range(topic)
    admin.namespaces.unload_namespace_bundle("public/default", bundle)
    for i in range(20):  # the producer reconnects by itself (CLOSE_PRODUCER) and sends on
        producer.send(f"after-{i}".encode())
    got = [m.data().decode() for m in receive_n(consumer, 40, timeout_ms=15000, ack=True)]
    assert sorted(got) == sorted([f"before-{i}" for i in range(20)] + [f"after-{i}" for i in range(20)])
    stats = call(broker, "GET", f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats")[1]
    assert len(stats["publishers"]) == 1 and len(stats["subscriptions"]["sub"]["consumers"]) == 1


def test_a_split_cuts_the_bundle_in_two_and_the_topic_stays_served(broker, client, topic):
    admin = AdminClient(broker.http_url)
    producer = client.create_producer(topic)
    bundle = admin.lookups.get_bundle_range(topic)
    admin.namespaces.split_namespace_bundle("public/default", bundle)
    data = admin.namespaces.get_bundles("public/default")
    assert data["numBundles"] == 5
    lower, upper = (int(x, 16) for x in bundle.split("_"))
    assert f"0x{lower + (upper - lower) // 2:08x}" in data["boundaries"]
    assert admin.lookups.get_bundle_range(topic) != bundle
    producer.send(b"still served")
    status, _ = call(broker, "PUT", "/admin/v2/namespaces/public/default/0x00000000_0x00000001/split")
    assert status == 400  # not one of the namespace's bundles
