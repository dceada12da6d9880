"""A broker out of file descriptors answers with an error, says so once, and recovers by itself.

The broker's descriptor limit is lowered from outside (``prlimit``, as ``ulimit -n`` would set
it at start) to what it uses: opening a new topic or subscription then fails with EMFILE, and so
does accepting a connection.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import ssl
import time
import urllib.error
import urllib.request

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.protocol import wire

from ..waiting import eventually
from .conftest import CLIENT_LOGGER
from .support import RawConnection, labelled, receive_n, round_trip
from .tls_certs import tls_settings

pytestmark = pytest.mark.interop

BASE = wire.BaseCommand
OUT_OF_FDS_LOG = "out of file descriptors (limit"
OUT_OF_FDS = "out of file descriptors"
#: The official client refused for want of descriptors gives up after this.
LATE_TIMEOUT_S = 3


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def all_in_use(pid: int, limit: int) -> None:
    """Wait until the broker holds ``limit`` descriptors again: a refused connection's is closed
    and the spare taken back (a client coming in between would find a descriptor free)."""
    eventually(lambda: open_fds(pid) == limit, what=f"{limit} descriptors open")


def set_soft_limit(pid: int, soft: int) -> None:
    _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))


def refusals(broker) -> dict[str, float]:
    return labelled(broker, "magnetar_out_of_file_descriptors_total", "what")


def reads_refused(connection: http.client.HTTPConnection) -> float:
    """``magnetar_out_of_file_descriptors_total{what="read"}``, scraped on a kept-alive connection."""
    connection.request("GET", "/metrics")
    text = connection.getresponse().read().decode()
    return next(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "magnetar_out_of_file_descriptors_total" and sample.labels.get("what") == "read"
    )


def expect_error(raw: RawConnection, code: int) -> str:
    frame = raw.recv_frame(timeout=5)
    assert frame is not None, "the broker closed the connection without an answer"
    assert frame.type == BASE.ERROR, frame.command
    assert frame.body().error == code, frame.command
    return frame.body().message


def refused_at_connect(port: int, tls: ssl.SSLContext | None = None) -> str:
    """A raw connection's CONNECT is answered with ServiceNotReady, then the connection is closed;
    the error's message."""
    raw = RawConnection(port, tls=tls)
    try:
        raw.send_command(wire.CommandConnect(client_version="late", protocol_version=20))
        message = expect_error(raw, wire.ServiceNotReady)
        assert raw.recv_frame() is None  # then closed
    finally:
        raw.close()
    return message


def http_refusal(url: str, tls: ssl.SSLContext | None = None) -> str:
    """A GET answered 503; the reason its JSON body gives."""
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(url + "/admin/v2/brokers/health", timeout=5, context=tls)
    assert answer.value.code == 503
    return json.loads(answer.value.read())["reason"]


def serving(broker, client, topic: str):
    """The broker's pid, and a producer and consumer of ``topic`` that have sent and received one
    message: what must go on working once descriptors run out."""
    pid = broker.proc.pid
    assert pid is not None
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "existing")
    producer.send(b"before")
    assert receive_n(consumer, 1, ack=True)[0].data() == b"before"
    return pid, producer, consumer


def test_out_of_file_descriptors_is_answered_logged_once_counted_and_recovered_from(
    broker, client, client_factory, topic
):
    pid, producer, consumer = serving(broker, client, topic)
    raws = []
    for _ in range(40):  # connections whose closing frees descriptors later
        raw = RawConnection(broker.port)
        raw.handshake()
        raws.append(raw)

    set_soft_limit(pid, open_fds(pid))  # not one descriptor left
    try:
        for attempt in range(3):
            raws[0].send_command(
                wire.CommandProducer(topic=f"{topic}-new", producer_id=attempt, request_id=attempt)
            )
            assert "out of file descriptors" in expect_error(raws[0], wire.NotAllowedError)
        raws[1].send_command(
            wire.CommandSubscribe(
                topic=topic,
                subscription="new-sub",
                sub_type=wire.CommandSubscribe.Shared,
                consumer_id=1,
                request_id=1,
            )
        )
        assert "out of file descriptors" in expect_error(raws[1], wire.NotAllowedError)
        # What is open goes on working.
        producer.send(b"during")
        assert receive_n(consumer, 1, ack=True)[0].data() == b"during"
        raws[0].send_command(wire.CommandPing())
        assert raws[0].expect(BASE.PONG)

        # Descriptors come free: new topics, subscriptions and clients work again, unasked.
        for raw in raws[2:]:
            raw.close()
        fresh = client_factory(broker.service_url)
        new_producer = fresh.create_producer(f"{topic}-new")
        new_consumer = fresh.subscribe(topic, "new-sub", initial_position=pulsar.InitialPosition.Earliest)
        new_producer.send(b"after")
        producer.send(b"after")
        assert [m.data() for m in receive_n(new_consumer, 3, ack=True)] == [b"before", b"during", b"after"]

        # Near the limit a new connection's CONNECT is answered with an error, not dropped.
        set_soft_limit(pid, open_fds(pid) + 4)
        refused = RawConnection(broker.port)
        refused.send_command(wire.CommandConnect(client_version="late", protocol_version=20))
        assert "out of file descriptors" in expect_error(refused, wire.ServiceNotReady)
        assert refused.recv_frame() is None  # then closed
        refused.close()
    finally:
        set_soft_limit(pid, 4096)
    late = RawConnection(broker.port)
    late.handshake()
    late.close()

    counts = refusals(broker)
    assert counts["topic"] == 3 and counts["subscription"] == 1 and counts["connection"] == 1
    log = broker.log_text()
    assert log.count(OUT_OF_FDS_LOG) == 1, log  # once, not per attempt
    for raw in raws[:2]:
        raw.close()


def test_a_client_asking_for_a_topic_while_descriptors_are_short_is_refused_at_once_and_served_later(
    broker, client, topic
):
    """The refusal is NotAllowedError, which the official client does not retry: its call fails
    at once with the reason, not after its whole operation timeout (PersistenceError it would retry
    for 30 s, each of thousands of topics in turn); once descriptors are free its next call works."""
    pid = broker.proc.pid
    assert pid is not None
    client.get_topic_partitions(f"{topic}-other")  # the client's connection is open before the shortage
    raws = [RawConnection(broker.port) for _ in range(40)]
    for raw in raws:
        raw.handshake()
    set_soft_limit(pid, open_fds(pid))
    try:
        with pytest.raises(pulsar.exceptions.NotAllowedError):
            client.create_producer(topic)  # a retried error would end in Timeout instead
        assert OUT_OF_FDS_LOG in broker.log_text()
        for raw in raws:
            raw.close()
        producer = client.create_producer(topic)
        producer.send(b"made it")
    finally:
        set_soft_limit(pid, 4096)


def test_with_not_one_descriptor_left_new_clients_are_answered_and_served_again_once_there_are(
    broker, client, client_factory, topic
):
    """Accepting a connection needs a descriptor itself: with none left the broker gives up a spare
    one it keeps to accept the connection and answer it (ServiceNotReady at its CONNECT, HTTP 503),
    instead of leaving the client to the event loop, which closes it without a word or leaves it
    waiting."""
    pid, producer, consumer = serving(broker, client, topic)
    late = client_factory(broker.service_url, operation_timeout_seconds=LATE_TIMEOUT_S)

    limit = open_fds(pid)
    set_soft_limit(pid, limit)  # not one descriptor left
    try:
        # The official client drops an ERROR before CONNECTED: it sees each of its connections
        # closed, tries again, and gives up at its operation timeout.
        started = time.monotonic()
        with pytest.raises((pulsar.Timeout, pulsar.ConnectError)):
            late.create_producer(f"{topic}-late")
        assert time.monotonic() - started < LATE_TIMEOUT_S + 5
        for _ in range(2):  # the spare is taken back after each
            all_in_use(pid, limit)
            assert OUT_OF_FDS in refused_at_connect(broker.port)
        all_in_use(pid, limit)
        assert OUT_OF_FDS in http_refusal(broker.http_url)
        # What is open goes on working.
        producer.send(b"during")
        assert receive_n(consumer, 1, ack=True)[0].data() == b"during"
    finally:
        set_soft_limit(pid, 4096)
    # Descriptors are free again: the same clients and new ones are served.
    late.create_producer(f"{topic}-late").send(b"late")
    fresh = client_factory(broker.service_url)
    assert round_trip(fresh, f"{topic}-fresh", [b"after"]) == [b"after"]
    raw = RawConnection(broker.port)
    raw.handshake()
    raw.close()

    counts = refusals(broker)
    assert counts["connection"] >= 4  # the official client's tries, two raw and one HTTP
    log = broker.log_text()
    assert log.count(OUT_OF_FDS_LOG) == 1, log


def test_with_not_one_descriptor_left_the_tls_ports_answer_too(broker_factory, tls_files, topic):
    """The spare descriptor is enough for a TLS handshake: the answer goes through it."""
    broker = broker_factory(tls_settings(tls_files))
    pid = broker.proc.pid
    assert pid is not None
    tls = ssl.create_default_context(cafile=str(tls_files.ca))
    limit = open_fds(pid)
    set_soft_limit(pid, limit)
    try:
        assert OUT_OF_FDS in refused_at_connect(broker.tls_port, tls)
        all_in_use(pid, limit)
        assert OUT_OF_FDS in http_refusal(broker.https_url, tls)
    finally:
        set_soft_limit(pid, 4096)
    tls_client = pulsar.Client(
        broker.service_url_tls,
        tls_trust_certs_file_path=str(tls_files.ca),
        operation_timeout_seconds=10,
        logger=CLIENT_LOGGER,
    )
    try:
        assert round_trip(tls_client, topic, [b"after"]) == [b"after"]
    finally:
        tls_client.close()
    assert refusals(broker)["connection"] == 2


#: More topics than the descriptors left to the broker could hold open, two files each.
MANY_TOPICS = 200


@pytest.mark.slow
def test_more_topics_than_descriptors_allow_open_are_each_written_and_read_back(
    broker_factory, client_factory, topic
):
    """Idle topics' files close (``max_open_ledger_files``): a broker with room for some 100 more
    descriptors serves 200 topics, each given a message and read back from its file (no entry
    cache), without one refusal."""
    broker = broker_factory({"max_open_ledger_files": 32, "entry_cache_bytes": 0})
    pid = broker.proc.pid
    assert pid is not None
    client = client_factory(broker.service_url)
    client.get_topic_partitions(topic)  # the client's connection is open before the limit is set
    set_soft_limit(pid, open_fds(pid) + 120)
    names = [f"{topic}-{i}" for i in range(MANY_TOPICS)]
    try:
        for i, name in enumerate(names):
            producer = client.create_producer(name, batching_enabled=False)
            producer.send(b"message %d" % i)
            producer.close()
        for i, name in enumerate(names):
            consumer = client.subscribe(name, "reader", initial_position=pulsar.InitialPosition.Earliest)
            assert receive_n(consumer, 1, ack=True)[0].data() == b"message %d" % i
            consumer.close()
        assert open_fds(pid) < resource.prlimit(pid, resource.RLIMIT_NOFILE)[0]
    finally:
        set_soft_limit(pid, 4096)
    assert sum(refusals(broker).values()) == 0
    assert OUT_OF_FDS_LOG not in broker.log_text()


def test_a_read_that_cannot_reopen_its_ledger_files_waits_for_descriptors_and_then_delivers(
    broker_factory, client_factory, topic
):
    """With every ledger's files closed but the most recently used (a bound of 2, no entry cache),
    a consumer's read reopens its topic's files; with no descriptor left that fails (EMFILE): the
    read is said once and counted, tried again, and delivers once descriptors are back, instead of
    a traceback and a consumer that gets nothing more."""
    broker = broker_factory({"max_open_ledger_files": 2, "entry_cache_bytes": 0})
    pid = broker.proc.pid
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "s", receiver_queue_size=1)
    producer = client.create_producer(topic, batching_enabled=False)
    for n in range(5):
        producer.send(b"m%d" % n)
    assert consumer.receive(10_000).data() == b"m0"  # the others wait for permits
    client.create_producer(f"{topic}-other").send(b"x")  # its files push the topic's out
    metrics = http.client.HTTPConnection("127.0.0.1", broker.http_port, timeout=10)
    reads_refused(metrics)  # kept open: /metrics is read on it while no new connection can be
    set_soft_limit(pid, open_fds(pid))
    try:
        consumer.acknowledge(consumer.receive(10_000))  # the one queued; its FLOW asks for a read
        eventually(lambda: reads_refused(metrics) >= 1, what="a read refused for want of descriptors")
    finally:
        set_soft_limit(pid, 4096)
        metrics.close()
    received = [consumer.receive(10_000).data() for _ in range(3)]
    assert received == [b"m2", b"m3", b"m4"]
    assert "Traceback" not in broker.log_text()


def lowest_free_fd(pid: int) -> int:
    """The descriptor the next open would get: a soft limit of this leaves none to open, even where
    closed files left holes below the highest one open."""
    taken = {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    return next(n for n in range(len(taken) + 1) if n not in taken)


def writes_refused(broker) -> float:
    return refusals(broker).get("write", 0.0)


#: A send the broker cannot store must fail well before the client's send timeout.
SEND_TIMEOUT_MS = 30_000


def test_a_write_that_cannot_reopen_its_ledger_files_fails_at_once_and_the_producer_goes_on_later(
    broker_factory, client_factory, topic
):
    """A producer's topic whose files were closed (a bound of 2 ledgers with open files) cannot
    reopen them with no descriptor left: the send fails at once with a clear error (the producer
    is closed, and its re-creation refused as a full disk's is, so the client fails the send rather
    than resend it until its send timeout), the broker says and counts it; once descriptors are
    back the same producer sends again. What failed was not stored."""
    broker = broker_factory({"max_open_ledger_files": 2, "entry_cache_bytes": 0})
    pid = broker.proc.pid
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
    producer.send(b"m0")
    client.create_producer(f"{topic}-other").send(b"x")  # its files push the topic's out
    set_soft_limit(pid, lowest_free_fd(pid))
    try:
        started = time.monotonic()
        with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
            producer.send(b"m1")
        assert time.monotonic() - started < SEND_TIMEOUT_MS / 1000 / 3
    finally:
        set_soft_limit(pid, 4096)
    producer.send(b"m2")  # the producer is created again once its files open
    assert writes_refused(broker) >= 1
    assert OUT_OF_FDS_LOG in broker.log_text() and "Traceback" not in broker.log_text()
    consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    assert [m.data() for m in receive_n(consumer, 2, ack=True)] == [b"m0", b"m2"]


def test_a_write_whose_ledger_file_is_gone_fails_at_once_saying_why(broker_factory, client_factory, topic):
    """The same with a file error: the open ledger's log was removed while its files were closed.
    The send fails at once, the broker logs why in one line (no traceback), and the producer is
    refused again, with the reason, while the file cannot be opened."""
    broker = broker_factory({"max_open_ledger_files": 2, "entry_cache_bytes": 0})
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=SEND_TIMEOUT_MS)
    producer.send(b"m0")
    client.create_producer(f"{topic}-other").send(b"x")  # its files push the topic's out
    (log_file,) = [p for p in broker.data_dir.glob("ledgers/*/*.log") if "other" not in str(p.parent)]
    log_file.rename(log_file.with_name(log_file.name + ".moved"))
    started = time.monotonic()
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        producer.send(b"m1")
    assert time.monotonic() - started < SEND_TIMEOUT_MS / 1000 / 3
    eventually(lambda: "files cannot be opened" in broker.log_text(), what="the refusal logged")
    assert "No such file or directory" in broker.log_text() and "Traceback" not in broker.log_text()
