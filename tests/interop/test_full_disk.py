"""A full disk is an error, not a hang: a broker whose data directory fills up (a real tmpfs of a
few MiB, see small_disk.py) fails sends promptly, answers a new subscription with an error, keeps
serving reads, logs a line per episode, shows it in /metrics, and takes writes again by itself
once there is room, with every receipted message kept exactly once."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest

from magnetar.protocol import wire
from tests.interop.conftest import _BROKERS, CLIENT_LOGGER, BrokerProcess
from tests.interop.small_disk import SmallDisk
from tests.interop.support import RawConnection, receive_n, scrape
from tests.waiting import eventually

DISK_BYTES = 24 * 1024 * 1024
SEND_TIMEOUT_MS = 10_000
#: A send must be stored or fail well before the send timeout: the timeout is not what ends it.
SEND_BOUND_S = 8.0
PAYLOAD_PAD = b"x" * (100 * 1024)


@pytest.fixture
def small_disk(request, tmp_path) -> Iterator[tuple[SmallDisk, BrokerProcess]]:
    """A broker whose data directory is a ``DISK_BYTES`` tmpfs of its own."""
    workdir = tmp_path / "broker"
    disk = SmallDisk(tmp_path, workdir / "data", DISK_BYTES).start()
    brokers: list[BrokerProcess] = []
    request.node.stash[_BROKERS] = brokers
    try:
        broker = disk.broker(workdir, getattr(request, "param", None))
        brokers.append(broker)
        yield disk, broker
    finally:
        for broker in brokers:
            broker.close()
        disk.close()


def send_within(producer, payload: bytes, bound: float = SEND_BOUND_S) -> tuple[pulsar.Result, object]:
    """Send and wait for the outcome, failing the test if there is none within ``bound`` seconds."""
    done = threading.Event()
    outcome: list = []

    def callback(result, msg_id) -> None:
        outcome.append((result, msg_id))
        done.set()

    producer.send_async(payload, callback)
    assert done.wait(bound), f"a send was neither stored nor failed within {bound}s"
    return outcome[0]


def metric(broker, name: str, topic: str) -> float | None:
    text = urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'topic="{topic}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def log_lines(broker) -> int:
    return len(broker.log_path.read_text(errors="replace").splitlines())


def read_everything(broker, topic: str) -> list[bytes]:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        seen = []
        while reader.has_message_available():
            seen.append(reader.read_next(5000).data())
        return seen
    finally:
        client.close()


def message(index: int) -> bytes:
    return f"m-{index:05d}-".encode() + PAYLOAD_PAD


@pytest.mark.slow
def test_full_disk_fails_sends_promptly_and_recovers_by_itself(small_disk, topic):
    disk, broker = small_disk
    broker.start()
    other = topic + "-other"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
    try:
        other_consumer = client.subscribe(other, "reads-on", consumer_type=pulsar.ConsumerType.Shared)
        other_producer = client.create_producer(other, batching_enabled=False)
        for i in range(5):
            other_producer.send(f"other-{i}".encode())
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
        stored: dict[bytes, object] = {}
        index = 0
        for _ in range(10):
            index += 1
            stored[message(index)] = producer.send(message(index))

        lines_before = log_lines(broker)
        disk.fill()

        # Sends fail promptly with an error (no endless reconnect-and-resend); a few may still fit in
        # zeros the ledger wrote ahead of its end.
        failures = []
        for _ in range(12):
            index += 1
            result, msg_id = send_within(producer, message(index))
            if result == pulsar.Result.Ok:
                stored[message(index)] = msg_id
            else:
                failures.append(result)
                if len(failures) == 3:
                    break
        assert failures, "sends kept being stored on a full disk"
        assert set(failures) == {pulsar.Result.ProducerBlockedQuotaExceededException}, failures

        # A new subscription gets an error on its connection, which stays usable.
        raw = RawConnection(broker.port)
        try:
            raw.handshake()
            raw.send_command(subscribe_command(topic, "new-while-full"))
            frame = raw.recv_frame(10)
            assert frame is not None, "the broker dropped the connection of a new subscription"
            assert frame.type == wire.BaseCommand.ERROR, frame.command
            assert frame.body().error == wire.PersistenceError, frame.command
            raw.send_command(wire.CommandPing())
            raw.expect(wire.BaseCommand.PONG)
        finally:
            raw.close()

        # Reads go on: the other topic's consumer gets what was stored before.
        got = receive_n(other_consumer, 5, ack=True)
        assert sorted(m.data() for m in got) == [f"other-{i}".encode() for i in range(5)]

        assert metric(broker, "magnetar_storage_writable", topic) == 0
        assert (metric(broker, "magnetar_storage_write_errors_total", topic) or 0) >= 1
        # One line per episode, not a traceback per attempt (the issue saw 25 lines per attempt).
        added = broker.log_path.read_text(errors="replace").splitlines()[lines_before:]
        assert len(added) <= 20 and not any("Traceback" in line for line in added), added

        disk.unfill()

        # The same producer gets going again by itself (after its reconnect backoff), no restart.
        def resend() -> bool:
            nonlocal index
            result, msg_id = send_within(producer, message(index + 1), SEND_TIMEOUT_MS / 1000 + 5)
            if result != pulsar.Result.Ok:
                return False
            index += 1
            stored[message(index)] = msg_id
            return True

        eventually(resend, timeout=60, interval=0, what="the producer sending again after space was freed")
        fresh = client.create_producer(topic, batching_enabled=False)
        for _ in range(3):
            index += 1
            stored[message(index)] = fresh.send(message(index))
        assert metric(broker, "magnetar_storage_writable", topic) == 1
    finally:
        client.close()

    # Every receipted message is there after a restart, once.
    broker.stop()
    broker.restart()
    seen = read_everything(broker, topic)
    assert sorted(seen) == sorted(stored), (len(seen), len(stored))


def test_pipelined_sends_into_a_filling_disk_each_end_and_none_is_stored_twice(small_disk, topic):
    """Many sends in flight when the disk runs out: each one ends (receipt or error) well before
    the send timeout, the broker drops the sends after the first it could not store (their
    producer is closed), and after a restart exactly the receipted messages are there, once."""
    disk, broker = small_disk
    broker.start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
    outcomes: dict[bytes, pulsar.Result] = {}
    all_done = threading.Event()
    count = 100
    try:
        producer = client.create_producer(
            topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS, max_pending_messages=count
        )
        disk.fill(leave=3 * 1024 * 1024)

        def callback_for(payload: bytes):
            def callback(result, msg_id) -> None:
                outcomes[payload] = result
                if len(outcomes) == count:
                    all_done.set()

            return callback

        for index in range(count):  # 100 x 100 KiB: about 10 MiB into 3 MiB of room
            producer.send_async(message(index), callback_for(message(index)))
        assert all_done.wait(SEND_BOUND_S), f"{count - len(outcomes)} sends neither stored nor failed"
    finally:
        client.close()
    stored = sorted(payload for payload, result in outcomes.items() if result == pulsar.Result.Ok)
    failed = {result for result in outcomes.values() if result != pulsar.Result.Ok}
    assert stored and failed == {pulsar.Result.ProducerBlockedQuotaExceededException}, (len(stored), failed)

    disk.unfill()
    broker.stop()
    broker.restart()
    assert sorted(read_everything(broker, topic)) == stored


def send_ends_within(producer, payload: bytes, bound: float = SEND_BOUND_S) -> type | None:
    """A blocking ``send`` in a thread of its own, failing the test unless it returns or raises
    within ``bound`` seconds; None when it was stored, else the type of its error."""
    outcome: list[type | None] = []

    def send() -> None:
        try:
            producer.send(payload)
            outcome.append(None)
        except pulsar.PulsarException as exc:
            outcome.append(type(exc))

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(bound)
    assert outcome, f"a blocking send neither returned nor raised within {bound}s"
    return outcome[0]


@pytest.mark.slow
def test_producers_of_a_disk_with_room_for_less_than_a_zero_step_end_their_sends_and_send_again(
    small_disk, topic
):
    """Issue 34: producers made before their disk filled (a blocking one with
    ``block_if_queue_full``, an async batched one, one on another topic) each end a send within
    their send timeout when the disk has less room than a step of the zeros a ledger writes ahead
    but more than the write gate's margin (before the fix the step failed, the gate saw room, the
    producer was re-admitted, and a blocking send never returned); once there is room the same
    producer objects send again, and nothing is stored twice."""
    disk, broker = small_disk
    broker.start()
    other = topic + "-other"
    payload = b"z" * 20 * 1024
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
    receipted: dict[str, list[bytes]] = {topic: [], other: []}
    try:
        options = {"send_timeout_millis": 30_000, "block_if_queue_full": True}
        blocking = client.create_producer(topic, batching_enabled=False, **options)
        batched = client.create_producer(topic, batching_enabled=True, send_timeout_millis=30_000)
        elsewhere = client.create_producer(other, batching_enabled=False, **options)
        index = 0

        def send(producer, to: str, bound: float = SEND_BOUND_S) -> type | None:
            nonlocal index
            index += 1
            data = b"%06d" % index + payload
            error = send_ends_within(producer, data, bound)
            if error is None:
                receipted[to].append(data)
            return error

        for _ in range(260):  # 5 MiB stored: the ledger now writes zeros 4 MiB ahead
            assert send(blocking, topic) is None
        assert send(elsewhere, other) is None
        lines_before = log_lines(broker)
        disk.fill(leave=3 * 1024 * 1024)  # room for entries, not for another step of zeros

        # The topic fills what is left; its first refused send ends promptly. (Later ones wait for
        # the client's next reconnect, which backs off, as after Pulsar's quota refusals.)
        stored_before = len(receipted[topic])
        error = None
        for _ in range(400):
            if (error := send(blocking, topic)) is not None:
                break
        assert error is pulsar.ProducerBlockedQuotaExceededException, error
        assert len(receipted[topic]) - stored_before > 100, "the room left was not used for entries"
        assert disk.free_bytes() < 1024 * 1024, "refused while the disk had room"
        outcome: list[pulsar.Result] = []
        done = threading.Event()
        batched.send_async(b"batched" + payload, lambda result, _id: (outcome.append(result), done.set()))
        assert done.wait(SEND_BOUND_S), "a batched send neither stored nor failed"
        assert outcome == [pulsar.Result.ProducerBlockedQuotaExceededException]
        # Another topic stores into the zeros its ledger wrote ahead (128 KiB), then is refused.
        errors = (send(elsewhere, other) for _ in range(20))
        assert next(e for e in errors if e is not None) is pulsar.ProducerBlockedQuotaExceededException

        added = broker.log_path.read_text(errors="replace").splitlines()[lines_before:]
        assert len(added) <= 20 and not any("Traceback" in line for line in added), added
        assert scrape(broker)[("magnetar_send_refusals_total", (("reason", "StorageRefused"),))] >= 3
        disk.unfill()
        for producer, to in ((blocking, topic), (elsewhere, other)):
            eventually(
                lambda p=producer, t=to: send(p, t, 35.0) is None,
                timeout=90,
                interval=0,
                what="the same producer sending again once there is room",
            )
        batched.send(b"batched-again")
        receipted[topic].append(b"batched-again")
    finally:
        client.close()
    broker.stop()
    broker.restart()
    for name, sent in receipted.items():
        assert sorted(read_everything(broker, name)) == sorted(sent), name


@pytest.mark.parametrize("small_disk", [{"min_free_disk_bytes": 8 * 1024 * 1024}], indirect=True)
def test_sends_refused_below_free_space_threshold_until_room_again(small_disk, topic):
    disk, broker = small_disk
    broker.start()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
        stored = {message(0): producer.send(message(0))}
        disk.fill(leave=4 * 1024 * 1024)  # room left, but below the threshold

        # Refused once the broker looks at the free space again (it reads it at most every 0.1 s).
        def refused() -> bool:
            payload = f"small-{len(stored)}".encode()
            result, msg_id = send_within(producer, payload)
            if result == pulsar.Result.Ok:
                stored[payload] = msg_id
                return False
            assert result == pulsar.Result.ProducerBlockedQuotaExceededException
            return True

        eventually(refused, timeout=10, interval=0.01, what="a send refused below min_free_disk_bytes")
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            client.create_producer(topic)
        assert disk.free_bytes() >= 3 * 1024 * 1024  # refused before the disk was full
        disk.unfill()

        def create() -> pulsar.Producer | None:
            try:
                return client.create_producer(topic, batching_enabled=False)
            except pulsar.ProducerBlockedQuotaExceededException:
                return None  # the broker has not read the free space since

        fresh = eventually(create, timeout=10, what="a producer accepted once there is room again")
        stored[message(100)] = fresh.send(message(100))
    finally:
        client.close()
    assert sorted(read_everything(broker, topic)) == sorted(stored)


def subscribe_command(topic: str, subscription: str) -> wire.CommandSubscribe:
    return wire.CommandSubscribe(
        topic=topic,
        subscription=subscription,
        sub_type=wire.CommandSubscribe.Exclusive,
        consumer_id=1,
        request_id=7,
    )
