"""The PUBLISHes of one connection's pass stored together (publish_batches.py), without a network:
which messages share an entry, in what order, what each entry holds (read back as MQTT
subscribers and Pulsar consumers read it), and how each message is answered."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.entries import DispatchEntry
from magnetar.broker.mqtt import inbound, publish_batches
from magnetar.broker.mqtt.messages import from_entry, pulsar_properties
from magnetar.broker.mqtt.publish_batches import Pending, PublishBatches
from magnetar.protocol import wire
from magnetar.protocol.batch import iter_batch
from magnetar.protocol.headers import parse_metadata
from magnetar.protocol.mqtt.properties import NONE
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.position import Position

NAME = TopicName.parse("persistent://public/default/sensors")
MAX_SIZE = 5 * 1024 * 1024


@dataclass
class Producer:
    name: str = "mqtt-car-7"
    producer_id: int = 3


@dataclass
class RecordingTopic:
    """What a persistent topic is asked to store: each entry's send, bytes and metadata; answers
    them in order (or fails every one with ``failure``)."""

    name: TopicName = NAME
    entries: list[tuple[wire.CommandSend, bytes, wire.MessageMetadata]] = field(default_factory=list)
    failure: Exception | None = None

    def publish(self, producer, send, data, callback, metadata) -> None:
        if self.failure is not None:
            raise self.failure
        self.entries.append((send, bytes(data), metadata))
        callback(Position(1, len(self.entries) - 1), None)


def pending(i: int, answers: list, qos: int = 1, payload: bytes | None = None) -> Pending:
    def stored(position: Position | None, exc: Exception | None) -> None:
        answers.append((i, position, exc))

    properties = [("i", str(i)), ("MQTT_QOS", str(qos))]
    return Pending(
        payload if payload is not None else f"m{i}".encode(), properties, i, 1000 + i, stored, qos == 2
    )


def read_back(topic: RecordingTopic) -> list[list[tuple[bytes, int, tuple]]]:
    """Each entry's messages as an MQTT subscriber gets them: (payload, QoS, user properties)."""
    out = []
    for n, (_, data, metadata) in enumerate(topic.entries):
        messages = from_entry(DispatchEntry(Position(1, n), data, 0, 1, metadata))
        assert messages is not None
        out.append([(m.payload, m.qos, m.properties) for m in messages])
    return out


def test_the_messages_of_a_pass_share_one_batch_entry_each_answered_once():
    topic, answers = RecordingTopic(), []
    batches, producer = PublishBatches(), Producer()
    for i in range(5):
        batches.add(topic, producer, pending(i, answers))  # type: ignore[arg-type]  # stand-ins
    assert batches
    batches.flush(MAX_SIZE)
    assert not batches
    ((send, _, metadata),) = topic.entries
    # the entry carries the first and the highest sequence id (deduplication) and counts each message
    assert (send.sequence_id, send.highest_sequence_id, send.num_messages) == (0, 4, 5)
    assert (metadata.sequence_id, metadata.highest_sequence_id, metadata.num_messages_in_batch) == (0, 4, 5)
    assert metadata.producer_name == "mqtt-car-7" and metadata.publish_time == 1000
    assert read_back(topic) == [[(f"m{i}".encode(), 1, (("i", str(i)),)) for i in range(5)]]
    assert answers == [(i, Position(1, 0), None) for i in range(5)]


def test_a_lone_message_and_qos_2_go_as_plain_entries_in_order():
    """A QoS 2 message is stored alone (its sequence id was recorded first): the run before it
    and the one after it are batches of their own, so the topic keeps the order they came in."""
    topic, answers = RecordingTopic(), []
    producer = Producer()
    messages = [pending(0, answers), pending(1, answers), pending(2, answers, qos=2)]
    messages += [pending(3, answers), pending(4, answers)]
    publish_batches.store_all(topic, producer, messages, MAX_SIZE)  # type: ignore[arg-type]
    assert [len(entry) for entry in read_back(topic)] == [2, 1, 2]
    assert [m[0] for entry in read_back(topic) for m in entry] == [f"m{i}".encode() for i in range(5)]
    plain = topic.entries[1][2]
    assert not plain.HasField("num_messages_in_batch") and plain.sequence_id == 2
    assert [a[0] for a in answers] == [0, 1, 2, 3, 4]
    lone = RecordingTopic()
    publish_batches.store_all(lone, producer, [pending(9, answers)], MAX_SIZE)  # type: ignore[arg-type]
    assert not lone.entries[0][2].HasField("num_messages_in_batch")


def test_batches_stay_within_their_bytes_and_large_messages_go_alone():
    topic, answers = RecordingTopic(), []
    big = b"x" * (publish_batches.BATCH_MAX_PAYLOAD + 1)
    mid = b"y" * 40_000  # four of these pass BATCH_MAX_BYTES (128 KiB)
    messages = [pending(i, answers, payload=mid) for i in range(4)] + [pending(4, answers, payload=big)]
    publish_batches.store_all(topic, Producer(), messages, MAX_SIZE)  # type: ignore[arg-type]
    assert [len(entry) for entry in read_back(topic)] == [3, 1, 1]
    assert all(len(data) < MAX_SIZE for _, data, _ in topic.entries)
    # a small max_message_size bounds a batch to half of it
    small = RecordingTopic()
    publish_batches.store_all(small, Producer(), [pending(i, answers) for i in range(40)], 200)  # type: ignore[arg-type]
    assert len(small.entries) > 1
    for _, data, _ in small.entries:
        metadata, body = parse_metadata(data)
        assert metadata.ByteSize() + len(body) <= 200


def test_a_batch_that_cannot_be_stored_fails_each_of_its_messages():
    failure = OSError("no space left on device")
    topic, answers = RecordingTopic(failure=failure), []
    publish_batches.store_all(topic, Producer(), [pending(i, answers) for i in range(3)], MAX_SIZE)  # type: ignore[arg-type]
    assert answers == [(i, None, failure) for i in range(3)]


@given(
    st.lists(st.tuples(st.text(max_size=20), st.text(max_size=20)), max_size=4),
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**63 - 1),
)
def test_single_metadata_is_what_protobuf_writes(properties, payload_size, sequence_id):
    expected = wire.SingleMessageMetadata(payload_size=payload_size, sequence_id=sequence_id)
    for key, value in properties:
        expected.properties.add(key=key, value=value)
    written = publish_batches.single_metadata(properties, payload_size, sequence_id)
    assert written == expected.SerializeToString()


def test_a_plain_publishs_properties_are_counted_as_any_others():
    """The properties of a PUBLISH without any are made and counted once (inbound, publish_batches):
    the same as ``pulsar_properties`` and the general count say."""
    for retain in (False, True):
        for qos in (0, 1, 2):
            plain = inbound._PLAIN_PROPERTIES[retain][qos]
            assert list(plain) == pulsar_properties(NONE, 0, retain, qos)
            general = sum(len(k) + len(v) + 4 for k, v in plain) + 16
            assert publish_batches._properties_size(plain) == general
    assert publish_batches._properties_size((("a", "bc"),)) == 1 + 2 + 4 + 16


def test_sequence_ids_of_every_width_are_written_as_protobuf_writes_them():
    topic, answers = RecordingTopic(), []
    batches, producer = PublishBatches(), Producer()
    ids = [0, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152, 2**40]
    for i in ids:
        batches.add(topic, producer, pending(i, answers))  # type: ignore[arg-type]  # stand-ins
    batches.flush(MAX_SIZE)
    ((_, data, metadata),) = topic.entries
    _, body = parse_metadata(memoryview(data))
    singles = list(iter_batch(body, metadata.num_messages_in_batch))
    assert [single.sequence_id for single, _ in singles] == ids
    assert [bytes(payload) for _, payload in singles] == [f"m{i}".encode() for i in ids]
