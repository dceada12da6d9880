"""Retained messages without a network: their records read back as written, a filter finds its
namespace's retained messages by their MQTT names, an expired one is deleted instead of sent,
and the store on a real metadata store keeps the latest of each topic."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.mqtt.records import RecordWriter
from magnetar.broker.mqtt.retained import (
    Retained,
    RetainedStore,
    decode_retained,
    encode_retained,
    kept_properties,
)
from magnetar.protocol.mqtt import Properties
from magnetar.storage.metadata_store import MetadataStore

TOPIC = "persistent://public/default/sensors%2F1"

properties = st.builds(
    Properties,
    payload_format_indicator=st.none() | st.sampled_from([0, 1]),
    content_type=st.none() | st.text(max_size=10),
    response_topic=st.none() | st.text(min_size=1, max_size=10),
    correlation_data=st.none() | st.binary(max_size=10),
    user_properties=st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=3).map(tuple),
)


@given(
    payload=st.binary(min_size=1, max_size=200),
    qos=st.integers(0, 2),
    props=properties,
    expires_at=st.none() | st.floats(0, 2e9),
)
def test_a_retained_record_reads_back_as_written(payload, qos, props, expires_at):
    message = Retained(TOPIC, payload, qos, props, expires_at)
    assert decode_retained(TOPIC, encode_retained(message)) == message


def test_only_what_a_later_subscriber_gets_is_kept_of_a_publish():
    published = Properties(
        content_type="text/plain",
        topic_alias=3,
        subscription_identifiers=(4,),
        message_expiry_interval=60,
        user_properties=(("k", "v"),),
    )
    assert kept_properties(published) == Properties(content_type="text/plain", user_properties=(("k", "v"),))


def test_a_filter_finds_the_retained_messages_of_its_namespace_and_drops_expired_ones(tmp_path):
    metadata = MetadataStore(tmp_path / "metadata.sqlite")
    executor = ThreadPoolExecutor(1)

    async def run() -> None:
        writer = RecordWriter(metadata, executor, "retained")
        store = RetainedStore(metadata, writer)
        none = Properties()
        await store.set(TOPIC, Retained(TOPIC, b"1", 1, none))
        await store.set(
            "persistent://public/default/sensors%2F2", Retained("x", b"2", 0, none, expires_at=100.0)
        )
        await store.set("persistent://other/ns/sensors%2F3", Retained("y", b"3", 0, none))
        await store.set("persistent://public/default/%24SYS%2Fx", Retained("z", b"$", 0, none))
        found = [m.payload for m in store.matching("public/default", "sensors/+", now=50.0)]
        assert found == [b"1", b"2"]
        assert [m.payload for m in store.matching("public/default", "#", now=50.0)] == [
            b"1",
            b"2",
        ]  # not $SYS
        assert [m.payload for m in store.matching("public/default", "sensors/+", now=150.0)] == [b"1"]
        await store.set(TOPIC, None)  # an empty retained PUBLISH
        assert list(store.matching("public/default", "sensors/+", now=150.0)) == []
        await writer.drain()  # the expired one's deletion
        reloaded = RetainedStore(metadata, RecordWriter(metadata, executor, "retained"))
        assert reloaded.load() == []
        assert sorted(reloaded.messages) == [
            "persistent://other/ns/sensors%2F3",
            "persistent://public/default/%24SYS%2Fx",
        ]

    asyncio.run(run())
    executor.shutdown()
    metadata.close()
