"""The MQTT session logic without a network: durable session records, expiry, the packet
identifiers a session keeps, which filters ask what of a topic, which Pulsar subscription a
session's consumer is on, and the ordered record writer over a real metadata store."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.mqtt.records import RecordWriter
from magnetar.broker.mqtt.remote import AckReceipt
from magnetar.broker.mqtt.session import NEVER, FilterOptions, MqttSession, expires_at
from magnetar.broker.mqtt.session_store import PREFIX, SessionStore, decode_record, encode_record, key_of
from magnetar.broker.mqtt.subscriptions import (
    BROADCAST_SUBSCRIPTION,
    Options,
    options_by_group,
    split_filter,
    subscription_name,
)
from magnetar.protocol.mqtt import Properties, Will
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.metadata_store import MetadataStore
from magnetar.storage.position import Position

DEFAULT = "public/default"


def topic(local: str, namespace: str = DEFAULT) -> TopicName:
    return TopicName.parse(f"persistent://{namespace}/{local}")


# -- records ---------------------------------------------------------------------------------------
@given(
    client_id=st.text(min_size=1, max_size=40),
    expiry=st.integers(1, NEVER),
    filters=st.dictionaries(
        st.text(min_size=1, max_size=20),
        st.builds(
            FilterOptions,
            st.integers(0, 2),
            st.booleans(),
            st.booleans(),
            st.none() | st.integers(1, 268_435_455),
        ),
        max_size=5,
    ),
    topics=st.sets(st.text(min_size=1, max_size=30), max_size=5),
    groups=st.sets(st.tuples(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=10)), max_size=3),
    disconnected_at=st.none() | st.floats(0, 2e9),
    role=st.none() | st.text(min_size=1, max_size=20),
)
def test_a_session_record_reads_back_as_it_was(
    client_id, expiry, filters, topics, groups, disconnected_at, role
):
    session = MqttSession(client_id, expiry=expiry, durable=True, role=role)
    session.filters = dict(filters)
    session.topics = set(topics)
    session.groups = set(groups)
    session.disconnected_at = disconnected_at
    back = decode_record(key_of(client_id), encode_record(session))
    assert (back.client_id, back.expiry, back.durable) == (client_id, expiry, True)
    assert list(back.filters.items()) == list(filters.items())  # subscribe order kept
    assert (back.topics, back.groups, back.disconnected_at) == (set(topics), set(groups), disconnected_at)
    assert back.role == role  # what its home may subscribe it to while it is away
    assert not back.records_loaded  # its QoS 2 records are read when it is resumed


@given(
    payload=st.binary(max_size=2000),
    qos=st.integers(0, 2),
    retain=st.booleans(),
    delay=st.integers(1, 0xFFFFFFFF),
    role=st.none() | st.text(min_size=1, max_size=20),
    due=st.floats(0, 2e9),
)
def test_a_will_held_back_reads_back_with_its_session(payload, qos, retain, delay, role, due):
    """A will held back by its Will Delay Interval is in the session's record: its topic,
    payload, QoS, retain flag and properties, when it is due and the role it goes as."""
    will = Will(
        "status/car-1",
        payload,
        qos,
        retain,
        Properties(will_delay_interval=delay, content_type="text/plain", user_properties=(("k", "v"),)),
    )
    session = MqttSession("car-1", expiry=NEVER, durable=True)
    session.pending_will, session.will_due, session.will_role = (will, object()), due, role
    back = decode_record(key_of("car-1"), encode_record(session))
    assert back.pending_will == (will, None)  # its connection is made again at restore
    assert (back.will_due, back.will_role) == (due, role)
    session.pending_will = None
    assert decode_record(key_of("car-1"), encode_record(session)).pending_will is None


def test_what_is_in_flight_is_stored_only_while_no_connection_serves_the_session():
    """Packet identifiers in flight change with every message: a record written while a
    connection serves the session leaves out those of QoS 1 messages (unless the broker is
    stopping), one written once it closed keeps them, and they read back as they were, with
    their QoS; those of QoS 2 messages, and PUBRELs not answered, are in every record."""
    session = MqttSession("car-2", expiry=NEVER, durable=True)
    one, two = ("persistent://public/default/a", 3, 7, 0), ("persistent://public/default/b", 4, 0, 2)
    assert session.sent(one, 12) is False  # QoS 1: nothing to write before it goes
    assert session.sent(two, 13, qos=2) is True  # QoS 2 under a new identifier: in the record first
    assert session.sent(two, 13, qos=2) is False  # sent again as it was: the record has it
    session.released.add(40)
    session.connection = object()
    back = decode_record(key_of("car-2"), encode_record(session))
    assert (back.unacked, back.released_ids()) == ({two: 13}, [40])
    assert back.in_flight(every=True) == [(two, 13, 2)]
    for record in (encode_record(session, in_flight=True), _away(session)):
        back = decode_record(key_of("car-2"), record)
        assert back.unacked == session.unacked
        assert back.unacked_ids == session.unacked_ids
        assert back.released_ids() == [40]
        assert sorted(back.in_flight(every=True)) == [(one, 12, 1), (two, 13, 2)]
    session.acknowledged(13)  # PUBREC: no longer in flight, in the next record neither
    session.connection = object()
    assert decode_record(key_of("car-2"), encode_record(session)).unacked == {}


def test_a_qos_2_message_sent_again_under_another_identifier_is_written_again():
    """A QoS 2 message handed out again while its first copy is in flight takes another
    identifier, which the record must hold before it goes; a session that ends with its
    connection writes nothing; a record of an older broker (no QoS) reads its messages as QoS 2."""
    session = MqttSession("car-3", expiry=NEVER, durable=True)
    key = ("persistent://public/default/c", 1, 2, 0)
    assert session.sent(key, 5, qos=2) is True
    assert session.sent(key, 6, qos=2) is True
    assert (session.unacked, session.unacked_ids) == ({key: 6}, {6: key})
    assert session.sent(key, 6, qos=1) is False  # at QoS 1 now (a filter granted less)
    assert session.in_flight(every=False) == []
    assert MqttSession("car-4").sent(key, 7, qos=2) is False
    old = '{"expiry":1,"filters":[],"topics":[],"groups":[],"disconnected_at":null,'
    old += '"in_flight":[["persistent://public/default/c",1,2,0,9]]}'
    assert decode_record(key_of("car-3"), old).in_flight(every=False) == [(key, 9, 2)]


def test_a_key_of_another_workers_topic_leaves_once_the_owner_answered():
    """A QoS 2 message of a topic another worker owns is awaited on the owner's answer
    (``AckReceipt``): kept until it says the acknowledgement is on disk; one read back after a
    restart is awaited nowhere until its topic's consumer asks the owner (``unwatched``)."""
    session = MqttSession("car-5", expiry=NEVER, durable=True)
    key = ("persistent://public/default/r", 1, 2, 0)
    receipt = AckReceipt()
    session.delivered(key, receipt)
    assert session.prune_delivered() is False and session.was_delivered(key)
    assert session.unwatched(key[0]) == []
    receipt.confirmed = True
    assert session.prune_delivered() is True and not session.was_delivered(key)
    session.delivered(key)  # as read back from the record
    assert (session.unwatched(key[0]), session.unwatched("persistent://public/default/s")) == ([key], [])
    lost = AckReceipt()
    session.watch_delivered(key[0], lost)
    session.unwatch([lost])  # the question was lost with the owner's session: asked again later
    assert session.unwatched(key[0]) == [key]
    session.watch_delivered(key[0], receipt)
    assert session.prune_delivered() is True and session.delivered_keys() == []


class Cursor:
    """A cursor as an MQTT session sees it (``AckedOnDisk``): what is acknowledged, whether that
    is all on disk, and how many times it was written there."""

    def __init__(self) -> None:
        self.acked: set[Position] = set()
        self.dirty = False
        self.persists = 0

    def is_acked(self, position: Position) -> bool:
        return position in self.acked

    def ack(self, position: Position) -> None:
        self.acked.add(position)
        self.dirty = True

    def persist(self) -> None:
        self.dirty = False
        self.persists += 1


def test_a_qos_2_message_delivered_is_kept_until_its_acknowledgement_is_on_disk():
    """A QoS 2 message the client PUBREC'd stays known as delivered (so a restart does not send
    it again) until its entry is acknowledged on its cursor and the cursor was written since;
    it is in every record, and reads back waiting for a cursor (a restart), which the session's
    subscription on its topic gives it."""
    topic = "persistent://public/default/t"
    batch = (topic, 3, 7, 0)
    alone = (topic, 3, 8, 0)
    cursor = Cursor()
    session = MqttSession("c", expiry=NEVER, durable=True)
    assert not session.any_delivered() and not session.prune_delivered()
    session.delivered(batch, cursor)
    session.delivered(alone, cursor)
    session.connection = object()
    back = decode_record(key_of("c"), encode_record(session))  # in the record before the PUBREL
    assert back.delivered_keys() == [batch, alone] and back.was_delivered(batch)
    cursor.persist()  # the batch's other message is not answered: its entry is not acknowledged
    assert not session.prune_delivered()
    cursor.ack(Position(3, 8))
    assert not session.prune_delivered()  # acknowledged, not on disk
    cursor.ack(Position(3, 9))  # more acknowledgements: still not written
    assert not session.prune_delivered()
    cursor.persist()
    assert session.prune_delivered() and session.delivered_keys() == [batch]
    cursor.ack(Position(3, 7))
    cursor.persist()  # written after the acknowledgement, before the session looked
    cursor.ack(Position(3, 10))
    assert not session.prune_delivered()  # it cannot tell: a write after it looked is awaited
    cursor.persist()
    assert session.prune_delivered() and session.delivered_keys() == []
    assert not session.was_delivered(batch) and "delivered" not in encode_record(session)

    back.prune_delivered()  # after a restart: no cursor known yet, nothing forgotten
    assert back.delivered_keys() == [batch, alone]
    other = Cursor()
    back.watch_delivered("persistent://public/default/u", other)  # another topic's
    other.ack(Position(3, 8))
    assert not back.prune_delivered()
    restarted = Cursor()
    restarted.ack(Position(3, 8))
    restarted.persist()  # as read from disk
    back.watch_delivered(topic, restarted)
    assert back.prune_delivered() and back.delivered_keys() == [batch]
    back.forget_topic(topic)  # unsubscribed: not waited for
    assert back.delivered_keys() == []


def _away(session: MqttSession) -> str:
    session.connection = None
    return encode_record(session)


def test_a_client_id_with_slashes_and_any_character_keys_one_record():
    assert key_of("a/b") != key_of("a") and key_of("a/b").startswith(PREFIX)
    assert "/" not in key_of("car/42 ü")[len(PREFIX) :]


# -- expiry ----------------------------------------------------------------------------------------
def test_expiry_counts_from_the_disconnection_or_from_a_restart_after_a_crash():
    assert expires_at(10, 1000.0, now=5000.0) == 1010.0
    assert expires_at(10, None, now=5000.0) == 5010.0  # connected when the broker died
    assert expires_at(NEVER, 1000.0, now=5000.0) is None


# -- packet identifiers kept by the session ----------------------------------------------------------
def test_an_unacknowledged_message_keeps_its_packet_identifier_until_acknowledged():
    session = MqttSession("c")
    key = ("persistent://public/default/t", 3, 7, 0)
    session.sent(key, 5)
    assert session.unacked == {key: 5} and session.unacked_ids == {5: key}
    session.sent(key, 9)  # sent again under another identifier: the old one is free
    assert session.unacked == {key: 9} and session.unacked_ids == {9: key}
    session.acknowledged(9)
    assert session.unacked == {} and session.unacked_ids == {}
    session.acknowledged(9)  # a late acknowledgement changes nothing
    other = ("persistent://public/default/u", 1, 1, 2)
    session.sent(key, 1)
    session.sent(other, 2)
    session.forget_topic("persistent://public/default/t")
    assert session.unacked == {other: 2} and session.unacked_ids == {2: other}


# -- filters and subscriptions -----------------------------------------------------------------------
def test_the_filters_matching_a_topic_merge_per_share_name():
    session = MqttSession("car-1")
    session.filters = {
        "city/+/alerts": FilterOptions(0, subscription_id=4),
        "city/#": FilterOptions(2, no_local=True, subscription_id=9),
        "$share/fleet/city/+/alerts": FilterOptions(1),
        "$share/other/elsewhere/#": FilterOptions(2),
        "persistent://smart-city/vehicles/car/+": FilterOptions(1, retain_as_published=True),
    }
    found = options_by_group(session, topic("city%2Farea-7%2Falerts"), DEFAULT)
    assert found == {
        # the highest QoS, every identifier; No Local only if every filter says so (city/+/alerts does not)
        None: Options(2, False, False, False, (4, 9)),
        "fleet": Options(1, False, False, False, ()),
    }
    prefixed = options_by_group(session, topic("car%2F42", "smart-city/vehicles"), DEFAULT)
    assert prefixed == {None: Options(1, False, True, True, ())}  # named its namespace: so do the messages
    assert options_by_group(session, topic("weather"), DEFAULT) == {}
    assert (
        options_by_group(session, topic("city%2Fx", "other/ns"), DEFAULT) == {}
    )  # not the default namespace


def test_a_filter_starting_with_a_wildcard_leaves_dollar_topics_out():
    session = MqttSession("c")
    session.filters = {"#": FilterOptions(1)}
    assert options_by_group(session, topic("%24SYS%2Fload"), DEFAULT) == {}
    assert None in options_by_group(session, topic("plain"), DEFAULT)


def test_which_pulsar_subscription_a_session_takes_its_messages_from():
    durable = MqttSession("car-7", expiry=60, durable=True)
    clean = MqttSession("car-8")
    assert subscription_name(durable, None) == "car-7"  # named after the client id, as MoP does
    assert subscription_name(clean, None) == BROADCAST_SUBSCRIPTION  # shared by every such client
    assert subscription_name(durable, "fleet") == subscription_name(clean, "fleet") == "fleet"
    assert split_filter("$share/fleet/a/#") == ("fleet", "a/#")
    assert split_filter("a/#") == (None, "a/#")


# -- the record writer, on a real metadata store -----------------------------------------------------
@pytest.fixture
def metadata(tmp_path):
    store = MetadataStore(tmp_path / "metadata.sqlite")
    yield store
    store.close()


def test_records_are_written_in_order_the_latest_value_of_each_key(metadata):
    executor = ThreadPoolExecutor(2)

    async def run() -> None:
        writer = RecordWriter(metadata, executor, "test")
        waits = [writer.set("k/a", str(i)) for i in range(50)]
        waits.append(writer.set("k/b", "kept"))
        waits.append(writer.set("k/c", "gone"))
        waits.append(writer.set("k/c", None))
        await asyncio.gather(*waits)
        assert dict(metadata.items("k/")) == {"k/a": "49", "k/b": "kept"}
        writer.close()
        with pytest.raises(RuntimeError):
            await writer.set("k/d", "after close")

    asyncio.run(run())
    executor.shutdown()


def test_stored_sessions_load_and_a_broken_record_is_left_alone(metadata):
    executor = ThreadPoolExecutor(1)

    async def run() -> tuple[list[MqttSession], list[str]]:
        store = SessionStore(metadata, RecordWriter(metadata, executor, "MQTT session"))
        session = MqttSession("device-1", expiry=NEVER, durable=True)
        session.filters["a/b"] = FilterOptions(1)
        session.topics.add("persistent://public/default/a%2Fb")
        await store.save(session)
        gone = MqttSession("device-2", expiry=5, durable=True)
        await store.save(gone)
        await store.delete("device-2")
        metadata.put(key_of("broken"), "{not json")
        return await asyncio.get_running_loop().run_in_executor(executor, store.load_all)

    loaded, broken = asyncio.run(run())
    executor.shutdown()
    assert [(s.client_id, s.expiry, list(s.filters), s.topics) for s in loaded] == [
        ("device-1", NEVER, ["a/b"], {"persistent://public/default/a%2Fb"})
    ]
    assert broken == [key_of("broken")]


# -- the server's sessions: open, resume, take over, end, expire, restore ----------------------------
class FakeConnection:
    """What ``Sessions`` asks of a connection: its address, its role, its consumers, closing it."""

    def __init__(self, name: str, role: str | None = None) -> None:
        self.remote = name
        self.auth = SimpleNamespace(role=role)
        self.consumers: dict = {}
        self.closed_with: list[int] = []

    def close_with(self, reason: int, message: str | None = None) -> None:
        self.closed_with.append(reason)

    def release_producers(self) -> None:
        self.producers_released = True


class FakeServer:
    """The MQTT server around ``Sessions``: its QoS 2 records on a real metadata store, a service
    with no topic loaded."""

    def __init__(self, metadata: MetadataStore) -> None:
        from types import SimpleNamespace

        from magnetar.broker.mqtt.qos2_store import Qos2Store

        self.service = SimpleNamespace(
            storage=SimpleNamespace(metadata=metadata),
            config=SimpleNamespace(mqtt_default_tenant="public", mqtt_default_namespace="default"),
            topics={},
            catalog=SimpleNamespace(exists=lambda key: False),
        )
        self.qos2 = Qos2Store(metadata)


def run_sessions(metadata, scenario) -> None:
    from magnetar.broker.mqtt.sessions import Sessions

    executor = ThreadPoolExecutor(1)
    server = FakeServer(metadata)

    async def run() -> None:
        writer = RecordWriter(metadata, executor, "MQTT session")
        sessions = Sessions(server, writer)  # type: ignore[arg-type]  # a fake server
        await scenario(sessions, writer)
        await writer.drain()

    asyncio.run(run())
    server.qos2.close()
    executor.shutdown()


def stored(metadata: MetadataStore) -> dict[str, MqttSession]:
    loaded, broken = SessionStore(metadata, None).load_all()  # type: ignore[arg-type]  # reads only
    assert broken == []
    return {s.client_id: s for s in loaded}


def test_a_durable_session_is_stored_resumed_and_expires(metadata):
    async def scenario(sessions, writer) -> None:
        first = FakeConnection("a", role="fleet")
        session, present, loading = sessions.open(first, "car", clean=False, expiry=3600)
        await loading  # its record is durable before the CONNACK
        assert not present and session.durable and stored(metadata)["car"].disconnected_at is None
        sessions.connection_ended(session, first)
        await writer.drain()
        assert stored(metadata)["car"].disconnected_at is not None  # its expiry counts from here
        assert stored(metadata)["car"].role == "fleet"  # what it may be subscribed to while away
        loop = asyncio.get_running_loop()
        assert abs(session.expiry_timer.when() - (loop.time() + 3600)) < 5
        second = FakeConnection("b", role="fleet-2")
        again, present, loading = sessions.open(second, "car", clean=False, expiry=3600)
        await loading
        assert again is session and present and session.expiry_timer is None
        assert session.role == "fleet-2"  # its last connection's
        sessions.connection_ended(session, again.connection)
        sessions._expire(session)  # its Session Expiry Interval passed
        await sessions._ending["car"]  # its subscriptions and QoS 2 records deleted
        assert "car" not in sessions.by_client and session.ended
        await writer.drain()
        assert stored(metadata) == {}

    run_sessions(metadata, scenario)


def test_clean_start_ends_the_old_session_and_a_second_connection_takes_over(metadata):
    async def scenario(sessions, writer) -> None:
        first = FakeConnection("first")
        old, _, loading = sessions.open(first, "bike", clean=False, expiry=60)
        await loading
        old.filters["a/b"] = FilterOptions(1)
        second = FakeConnection("second")
        new, present, loading = sessions.open(second, "bike", clean=True, expiry=60)
        await loading
        assert first.closed_with == [0x8E]  # Session taken over
        assert not present and new is not old and old.ended and new.filters == {}
        await writer.drain()
        assert list(stored(metadata)["bike"].filters) == []  # the new session's record, not the old

    run_sessions(metadata, scenario)


def test_a_session_that_ends_with_its_connection_is_never_stored(metadata):
    async def scenario(sessions, writer) -> None:
        cnx = FakeConnection("c")
        session, present, loading = sessions.open(cnx, "phone", clean=True, expiry=0)
        await loading
        assert not present and not session.durable
        sessions.connection_ended(session, cnx)
        assert "phone" not in sessions.by_client
        await writer.drain()
        assert stored(metadata) == {}

    run_sessions(metadata, scenario)


def test_restored_sessions_expire_by_the_time_their_connection_closed(metadata):
    now = 10_000.0

    async def scenario(sessions, writer) -> None:
        for client_id, expiry, closed in (
            ("gone", 10, now - 100),
            ("later", 600, now - 100),
            ("ever", NEVER, now - 1e6),
        ):
            session = MqttSession(client_id, expiry=expiry, durable=True)
            session.disconnected_at = closed
            await sessions.store.save(session)
        crashed = MqttSession("crashed", expiry=30, durable=True)  # connected when the broker died
        await sessions.store.save(crashed)
        sessions.restore(list(stored(metadata).values()), now)
        await asyncio.sleep(0)
        assert sorted(sessions.by_client) == ["crashed", "ever", "later"]
        loop = asyncio.get_running_loop()
        assert abs(sessions.by_client["later"].expiry_timer.when() - (loop.time() + 500)) < 5
        assert abs(sessions.by_client["crashed"].expiry_timer.when() - (loop.time() + 30)) < 5
        assert sessions.by_client["ever"].expiry_timer is None
        await writer.drain()
        assert sorted(stored(metadata)) == ["crashed", "ever", "later"]
        assert stored(metadata)["crashed"].disconnected_at == now  # counted from the restart
        sessions.close()

    run_sessions(metadata, scenario)
