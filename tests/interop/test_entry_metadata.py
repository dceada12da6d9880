"""Broker entry metadata (PIP 70) against a broker process: the official client, our client, raw frames.

Layout on disk byte for byte against what the official client sent (through a recording
proxy), exposure on and off, the index across ledger rollover and kill -9, seek by time with
skewed producer clocks, and the index look-ups over the admin HTTP API.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request

import pulsar
import pytest

from magnetar.client import Client, MessageId
from magnetar.client import producer as magnetar_producer
from magnetar.client.admin import AdminClient, ConflictError, NotFoundError
from magnetar.protocol import FrameDecoder, wire
from magnetar.protocol.headers import parse_metadata, verify_checksum
from magnetar.storage.names import encode_name
from tests.broker.entry_harness import segment_records as segment_log_records

from ..waiting import eventually
from .support import (
    RawConnection,
    admin_call,
    assert_next_is_marker,
    msg_id_tuple,
    receive_n,
)

pytestmark = pytest.mark.interop

BATCH = dict(batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=60_000)


def send_batch(producer, payloads: list[bytes]) -> None:
    results = []
    for payload in payloads:
        producer.send_async(payload, lambda res, _id: results.append(res))
    producer.flush()
    assert results == [pulsar.Result.Ok] * len(payloads)


def produce_mixed(client, topic: str, rounds: int = 3, name: str = "mixed") -> list[bytes]:
    """Plain messages and batches of 5, in turn; returns the payloads in the order stored."""
    plain = client.create_producer(topic, producer_name=f"{name}-plain", batching_enabled=False)
    batched = client.create_producer(topic, producer_name=f"{name}-batched", **BATCH)
    sent = []
    for r in range(rounds):
        for i in range(2):
            plain.send(b"%s-plain-%d-%d" % (name.encode(), r, i))
            sent.append(b"%s-plain-%d-%d" % (name.encode(), r, i))
        payloads = [b"%s-batch-%d-%d" % (name.encode(), r, i) for i in range(5)]
        send_batch(batched, payloads)
        sent += payloads
    plain.close()
    batched.close()
    return sent


def segment_records(broker, topic: str) -> list[bytes]:
    """Every record's data in the topic's segment files, read from the raw bytes, in order."""
    directory = broker.data_dir / "ledgers" / encode_name(topic)
    return [data for log in sorted(directory.glob("*.log")) for data in segment_log_records(log)]


class RecordingProxy:
    """A TCP proxy that keeps every byte the client sends; the broker advertises it in LOOKUP."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.target_port = 0
        self.streams: list[bytearray] = []
        self.sockets: list[socket.socket] = [self.server]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            self.sockets += [client, upstream]
            recorded = bytearray()
            self.streams.append(recorded)
            threading.Thread(target=self._pump, args=(client, upstream, recorded), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, recorded: bytearray | None) -> None:
        try:
            while data := src.recv(65536):
                if recorded is not None:
                    recorded += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def sent_payloads(self) -> list[bytes]:
        """The producer's bytes of every SEND, as the client put them on the wire."""
        out = []
        for stream in self.streams:
            decoder = FrameDecoder(64 * 1024 * 1024)
            decoder.feed(bytes(stream))
            while (frame := decoder.next_frame()) is not None:
                if frame.type == wire.BaseCommand.SEND:
                    out.append(bytes(frame.payload))
        return out

    def close(self) -> None:
        for s in self.sockets:
            s.close()


# -- layout ----------------------------------------------------------------------------------------


def test_stored_bytes_are_metadata_then_exactly_what_the_client_sent(broker_factory, client_factory, topic):
    proxy = RecordingProxy()
    try:
        broker = broker_factory({"advertised_address": proxy.url})
        proxy.target_port = broker.port
        client = client_factory(proxy.url)
        consumer = client.subscribe(topic, "keep")  # keeps the ledgers from retention
        before = int(time.time() * 1000)
        sent = produce_mixed(client, topic, rounds=2)
        after = int(time.time() * 1000)
        assert len(receive_n(consumer, len(sent))) == len(sent)
        client.close()
        assert broker.stop() == 0
        wire_payloads = proxy.sent_payloads()
    finally:
        proxy.close()

    records = segment_records(broker, topic)
    assert len(records) == len(wire_payloads) == 2 * (2 + 1)  # 2 plain + 1 batch per round
    message_count = 0
    for record, producer_bytes in zip(records, wire_payloads, strict=True):
        assert record[:2] == b"\x0e\x02"
        (size,) = struct.unpack_from(">I", record, 2)
        meta = wire.BrokerEntryMetadata()
        meta.ParseFromString(record[6 : 6 + size])
        # the producer's bytes follow untouched: same bytes, its own CRC32C still valid
        assert record[6 + size :] == producer_bytes
        verify_checksum(record[6 + size :])
        metadata, _ = parse_metadata(producer_bytes)
        message_count += metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
        assert meta.index == message_count - 1
        assert before <= meta.broker_timestamp <= after


# -- exposure ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("exposed", [True, False], ids=["exposed", "stripped"])
def test_official_client_works_with_exposure_on_and_off(broker_factory, client_factory, topic, exposed):
    broker = broker_factory({"expose_entry_metadata_to_client": exposed})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
    sent = produce_mixed(client, topic)
    got = receive_n(consumer, len(sent), ack=True)
    assert [m.data() for m in got] == sent
    assert_next_is_marker(consumer, client.create_producer(topic))
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [m.data() for m in receive_reader(reader, len(sent))] == sent


def receive_reader(reader, n: int) -> list:
    return [reader.read_next(5000) for _ in range(n)]


@pytest.mark.parametrize("exposed", [True, False], ids=["exposed", "stripped"])
@pytest.mark.parametrize("announces", [True, False], ids=["announces", "silent"])
def test_message_frames_carry_metadata_only_when_exposed_and_announced(
    broker_factory, topic, exposed, announces
):
    broker = broker_factory({"expose_entry_metadata_to_client": exposed})
    raw = RawConnection(broker.port)
    try:
        connect = wire.CommandConnect(client_version="raw", protocol_version=20)
        if announces:
            connect.feature_flags.supports_broker_entry_metadata = True
        raw.send_command(connect)
        raw.expect(wire.BaseCommand.CONNECTED)
        name = raw.create_producer(topic)
        raw.send_message(1, name, 0, b"payload")
        raw.expect(wire.BaseCommand.SEND_RECEIPT)
        raw.send_command(
            wire.CommandSubscribe(
                topic=topic,
                subscription="s",
                sub_type=wire.CommandSubscribe.Exclusive,
                consumer_id=7,
                request_id=2,
                initial_position=wire.CommandSubscribe.Earliest,
            )
        )
        raw.expect(wire.BaseCommand.SUCCESS)
        raw.send_command(wire.CommandFlow(consumer_id=7, message_permits=10))
        frame = raw.expect(wire.BaseCommand.MESSAGE)
    finally:
        raw.close()
    payload = bytes(frame.payload)
    if exposed and announces:
        assert payload[:2] == b"\x0e\x02"
        size = struct.unpack_from(">I", payload, 2)[0]
        meta = wire.BrokerEntryMetadata()
        meta.ParseFromString(payload[6 : 6 + size])
        assert meta.index == 0 and meta.broker_timestamp > 0
        payload = payload[6 + size :]
    assert payload[:2] == b"\x0e\x01"
    verify_checksum(payload)


@pytest.mark.parametrize("exposed", [True, False], ids=["exposed", "stripped"])
def test_our_client_exposes_index_and_broker_time_per_message(broker_factory, client_factory, topic, exposed):
    broker = broker_factory({"expose_entry_metadata_to_client": exposed})
    official = client_factory(broker.service_url)
    official.subscribe(topic, "keep").close()
    before = int(time.time() * 1000)
    sent = produce_mixed(official, topic)
    after = int(time.time() * 1000)
    ours = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        reader = ours.create_reader(topic, MessageId.earliest)
        got = [reader.read_next(5000) for _ in sent]
    finally:
        ours.close()
    assert [m.data() for m in got] == sent
    if not exposed:
        assert all(m.index() is None and m.broker_publish_time() is None for m in got)
        return
    assert [m.index() for m in got] == list(range(len(sent)))
    assert all(before <= m.broker_publish_time() <= after for m in got)
    batch_members = [m for m in got if m.message_id().batch_index() >= 0]
    assert len(batch_members) == 15
    # inside a batch of n with entry index e: message i has index e - n + i + 1
    for m in batch_members:
        same_entry = [x for x in got if x.message_id().entry_position() == m.message_id().entry_position()]
        assert m.index() == same_entry[-1].index() - 5 + m.message_id().batch_index() + 1


# -- the index across rollover and kill -9 -------------------------------------------------------------


def read_indexes(broker, topic: str) -> list[tuple[int, tuple[int, int, int], bytes]]:
    """(index, message id, payload) of everything stored, read with our client."""
    ours = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        reader = ours.create_reader(topic, MessageId.earliest)
        out = []
        while reader.has_message_available():
            m = reader.read_next(5000)
            out.append((m.index(), msg_id_tuple(m.message_id()), m.data()))
        return out
    finally:
        ours.close()


def test_index_is_continuous_across_rollover_and_kill_9(broker_factory, client_factory, topic):
    broker = broker_factory({"max_ledger_size_bytes": 2048, "fsync_policy": "always"})
    client = client_factory(broker.service_url)
    client.subscribe(topic, "keep").close()
    produce_mixed(client, topic, rounds=4, name="before")

    # keep producing from a thread while the broker is killed
    producer = client.create_producer(topic, producer_name="busy", send_timeout_millis=0, **BATCH)
    stop = threading.Event()
    receipted = []

    def busy() -> None:
        i = 0
        while not stop.is_set():
            producer.send_async(b"busy-%d" % i, lambda res, _id: receipted.append(res))
            i += 1
            if i % 7 == 0:
                time.sleep(0.002)  # pacing: batches of seven, not synchronisation

    thread = threading.Thread(target=busy, daemon=True)
    thread.start()
    path = "/admin/v2/persistent/" + topic.split("://")[1] + "/stats"

    def stored_across_ledgers() -> bool:
        ledgers = [info for info in admin_call(broker, "GET", path)[1]["ledgers"] if info["entries"]]
        return len(receipted) >= 100 and len(ledgers) >= 4

    # killed among the busy producer's sends: many stored over several ledgers, more on their way
    eventually(stored_across_ledgers, what="100 busy sends receipted, over four ledgers")
    broker.kill9()
    stop.set()
    thread.join(5)
    broker.restart()
    producer.flush()  # the busy producer resends what the kill left unreceipted, before "after"
    client2 = client_factory(broker.service_url)
    produce_mixed(client2, topic, rounds=4, name="after")

    stored = read_indexes(broker, topic)
    assert [index for index, _, _ in stored] == list(range(len(stored)))  # no gap, no repeat
    ids = [msg_id for _, msg_id, _ in stored]
    assert ids == sorted(ids)
    assert len({ledger for ledger, _, _ in ids}) > 3  # the index went on across ledgers
    assert stored[-1][2] == b"after-batch-3-4"


def test_index_continues_after_a_clean_restart(broker_factory, client_factory, topic):
    broker = broker_factory({"max_ledger_size_bytes": 4096})
    client = client_factory(broker.service_url)
    client.subscribe(topic, "keep").close()
    produce_mixed(client, topic, rounds=2, name="a")
    client.close()
    assert broker.stop() == 0
    broker.restart()
    produce_mixed(client_factory(broker.service_url), topic, rounds=2, name="b")
    stored = read_indexes(broker, topic)
    assert [index for index, _, _ in stored] == list(range(2 * 2 * 7))


# -- seek by time with skewed producer clocks ---------------------------------------------------------


def test_seek_by_time_follows_broker_time_not_producer_clocks(
    broker_factory, client_factory, topic, monkeypatch
):
    broker = broker_factory()
    hour = 3_600_000
    ours = Client(broker.service_url, operation_timeout_seconds=10)
    groups = {}
    try:
        producer = ours.create_producer(topic, batching_enabled=False)
        for name, skew in (("ahead", hour), ("behind", -hour), ("on-time", 0)):
            monkeypatch.setattr(
                magnetar_producer, "_now_ms", lambda skew=skew: int(time.time() * 1000) + skew
            )
            groups[name] = int(time.time() * 1000)
            time.sleep(0.005)  # broker times apart: the pauses are the behaviour
            for i in range(5):
                producer.send(b"%s-%d" % (name.encode(), i))
                time.sleep(0.002)  # one broker millisecond each, so each time names one message
            time.sleep(0.005)
        monkeypatch.undo()
        reader = ours.create_reader(topic, MessageId.earliest)
        stored = [reader.read_next(5000) for _ in range(15)]
    finally:
        ours.close()
    # the producers' clocks were an hour off either way; broker time follows the storing order
    assert stored[0].publish_timestamp() - stored[5].publish_timestamp() > hour
    broker_times = [m.broker_publish_time() for m in stored]
    assert broker_times == sorted(broker_times)

    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "seeker", initial_position=pulsar.InitialPosition.Earliest)
    for name in ("ahead", "behind", "on-time"):
        consumer.seek(groups[name])
        assert receive_n(consumer, 1)[0].data() == b"%s-0" % name.encode(), name
    k = next(k for k in range(7, 15) if broker_times[k] > broker_times[k - 1])
    consumer.seek(broker_times[k])
    assert [m.data() for m in receive_n(consumer, 15 - k)] == [m.data() for m in stored[k:]]
    consumer.seek(broker_times[-1] + 1)
    assert_next_is_marker(consumer, client.create_producer(topic))  # a message seeked past would come first


# -- index look-ups over HTTP ---------------------------------------------------------------------------


def test_index_lookups_both_ways(broker_factory, client_factory, topic):
    broker = broker_factory({"max_ledger_size_bytes": 512})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    sent = produce_mixed(client, topic, rounds=4)
    got = receive_n(consumer, len(sent))
    admin = AdminClient(broker.http_url)
    for index, msg in enumerate(got):
        official_id = msg.message_id()
        found = admin.message_id_for_index(topic, index)
        assert msg_id_tuple(found) == msg_id_tuple(official_id)
        assert found.partition() == -1 and found.topic_name() == topic
        assert admin.index_for_message_id(topic, official_id) == index  # an official MessageId
        assert admin.index_for_message_id(topic, found) == index  # ours
    assert (
        admin.index_for_message_id(
            topic, (got[3].message_id().ledger_id(), got[3].message_id().entry_id(), 1)
        )
        == 3
    )
    assert len({m.message_id().ledger_id() for m in got}) > 1

    # the raw endpoints, as documented
    short = topic.removeprefix("persistent://")
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/persistent/{short}/messageid/4") as r:
        body = json.loads(r.read())
    mid = got[4].message_id()
    assert body == {
        "ledgerId": mid.ledger_id(),
        "entryId": mid.entry_id(),
        "batchIndex": mid.batch_index(),
        "partition": -1,
        "index": 4,
    }
    query = f"ledgerId={mid.ledger_id()}&entryId={mid.entry_id()}&batchIndex={mid.batch_index()}"
    with urllib.request.urlopen(f"{broker.http_url}/admin/v2/persistent/{short}/index?{query}") as r:
        assert json.loads(r.read()) == {"index": 4}

    # errors
    with pytest.raises(NotFoundError, match="past the last"):
        admin.message_id_for_index(topic, len(sent))
    with pytest.raises(NotFoundError):
        admin.message_id_for_index(topic + "-nope", 0)
    with pytest.raises(NotFoundError):
        admin.index_for_message_id(topic, (mid.ledger_id(), mid.entry_id() + 10_000))
    for bad in ("messageid/abc", "messageid/-1", "index?ledgerId=1", "index?ledgerId=x&entryId=0"):
        status, reason = http_error(f"{broker.http_url}/admin/v2/persistent/{short}/{bad}")
        assert status in (400, 404) and reason, (bad, status)


def http_error(url: str) -> tuple[int, str]:
    try:
        urllib.request.urlopen(url)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["reason"]
    raise AssertionError(f"{url} answered 200")


def test_index_lookups_when_the_index_interceptor_is_off(broker_factory, client_factory, topic):
    broker = broker_factory({"broker_entry_metadata_interceptors": ["broker_timestamp"]})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    client.create_producer(topic).send(b"x")
    msg = receive_n(consumer, 1)[0]
    admin = AdminClient(broker.http_url)
    with pytest.raises(ConflictError, match="index") as info:
        admin.message_id_for_index(topic, 0)
    assert info.value.status == 409 and "broker_entry_metadata_interceptors" in info.value.reason
    with pytest.raises(ConflictError):
        admin.index_for_message_id(topic, msg.message_id())


def test_index_lookups_on_partitions(broker_factory, client_factory, topic):
    broker = broker_factory()
    short = topic.removeprefix("persistent://")
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/persistent/{short}/partitions", data=b"2", method="PUT"
    )
    request.add_header("Content-Type", "application/json")
    urllib.request.urlopen(request).close()
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
    )
    for i in range(10):
        producer.send(b"%d" % i)
    got = receive_n(consumer, 10)
    admin = AdminClient(broker.http_url)
    per_partition: dict[int, list] = {}
    for m in sorted(got, key=lambda m: msg_id_tuple(m.message_id())):
        per_partition.setdefault(int(m.topic_name().rsplit("-", 1)[1]), []).append(m)
    assert sorted(per_partition) == [0, 1]
    for partition, messages in per_partition.items():
        for index, m in enumerate(messages):
            # the index is per partition: ask the partition, or pass a message id that names it
            assert admin.index_for_message_id(m.topic_name(), m.message_id()) == index
            found = admin.message_id_for_index(m.topic_name(), index)
            assert found.partition() == partition and msg_id_tuple(found) == msg_id_tuple(m.message_id())
            assert admin.index_for_message_id(topic, found) == index
    status, reason = http_error(f"{broker.http_url}/admin/v2/persistent/{short}/messageid/0")
    assert status == 400 and "partition" in reason
