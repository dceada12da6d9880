"""Faults of ``magnetar standalone --workers 2`` with the official client: a worker killed with -9
in the middle of traffic is started again by the supervisor, its clients reconnect by themselves,
no receipted message is lost and no flushed acknowledgement comes back, while the other worker's
clients see nothing; SIGTERM stops every worker cleanly; a worker that cannot start stops the
broker with one line."""

from __future__ import annotations

import os
import re
import signal
import threading

import pulsar
import pytest

from magnetar.broker.data_dir_lock import DataDirInUse, DataDirLock
from magnetar.broker_process import BrokerProcessError
from magnetar.client.admin import AdminClient

from ..waiting import eventually
from .support import receive_n
from .test_workers import WORKERS, topics_on_two_owners

pytestmark = pytest.mark.interop

SERVING = re.compile(r"(worker-\d+) \(pid (\d+)\) serving on pulsar://[^:\s]+:(\d+)")


def worker_pids(broker) -> dict[str, int]:
    """The live workers' pids by their own pulsar:// URL, from the log's ``serving on`` lines."""
    return {f"pulsar://{broker.host}:{port}": int(pid) for _, pid, port in SERVING.findall(broker.log_text())}


def wait_for_a_cursor_flush(admin: AdminClient, topic: str, subscription: str) -> None:
    """Until the subscription's acknowledgements are all at the broker and written by a flush
    begun after that: they then survive kill -9."""
    eventually(lambda: admin.topics.stats(topic)["subscriptions"][subscription]["msgBacklog"] == 0)
    before = admin.topics.stats(topic)["subscriptions"][subscription]["ackState"]["flushes"]
    eventually(
        lambda: admin.topics.stats(topic)["subscriptions"][subscription]["ackState"]["flushes"] > before,
        what="a flush of the cursor",
    )


class Sending:
    """A producer sending without pause on a thread; what was receipted, and whether any send failed."""

    def __init__(self, producer, prefix: str) -> None:
        self.producer, self.prefix = producer, prefix
        self.receipted: list[bytes] = []
        self.failed: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            payload = f"{self.prefix}-{self.sent}".encode()
            self.sent += 1
            self.producer.send_async(payload, self._done(payload))
            if self.sent % 50 == 0:
                try:
                    self.producer.flush()
                except pulsar.PulsarException as exc:  # the broker is gone (a test killed it)
                    with self._lock:
                        self.failed.append(f"flush: {exc}")
                    return

    def _done(self, payload: bytes):
        def callback(result, _msg_id) -> None:
            with self._lock:
                if result == pulsar.Result.Ok:
                    self.receipted.append(payload)
                else:
                    self.failed.append(str(result))

        return callback

    def count(self) -> int:
        with self._lock:
            return len(self.receipted)

    def stop(self) -> None:
        self.stop_now()
        self.producer.flush()

    def stop_now(self) -> None:
        """Stop sending, without waiting for the receipts of what was sent."""
        self._stop.set()
        self._thread.join(30)


def test_a_worker_killed_mid_traffic_is_restarted_and_loses_nothing(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "kill")
    by_owner = {owner: topic for topic, owner in owners.items()}
    (victim_url, doomed), (_, spared) = sorted(by_owner.items())
    admin = AdminClient(broker.http_url)
    client = client_factory(broker.service_url, operation_timeout_seconds=30)
    consumers = {
        t: client.subscribe(t, "sub", consumer_type=pulsar.ConsumerType.Shared) for t in (doomed, spared)
    }
    first = client.create_producer(doomed, batching_enabled=False)
    for i in range(50):
        first.send(f"acked-{i}".encode())
    receive_n(consumers[doomed], 50, ack=True)
    wait_for_a_cursor_flush(admin, doomed, "sub")

    sending = {
        t: Sending(client.create_producer(t, batching_enabled=False), t[-8:]) for t in (doomed, spared)
    }
    eventually(lambda: sending[doomed].count() >= 200, what="receipts before the kill")
    os.kill(worker_pids(broker)[victim_url], signal.SIGKILL)
    eventually(lambda: len(SERVING.findall(broker.log_text())) == 3, what="the killed worker started again")
    marks = {t: s.count() for t, s in sending.items()}
    eventually(lambda: all(s.count() >= marks[t] + 200 for t, s in sending.items()), what="receipts after")
    for s in sending.values():
        s.stop()

    # Every receipted message of the killed worker's topic arrives (again, if it was not acknowledged);
    # none acknowledged and flushed before the kill comes back.
    want = set(sending[doomed].receipted)
    got: set[bytes] = set()
    while not want <= got:
        message = consumers[doomed].receive(15_000)
        consumers[doomed].acknowledge(message)
        assert not message.data().startswith(b"acked-"), message.data()
        got.add(message.data())
    # The other worker's clients saw nothing: every send receipted, each message once and in order.
    assert not sending[spared].failed
    spared_sent = sending[spared].receipted
    assert [m.data() for m in receive_n(consumers[spared], len(spared_sent), ack=True)] == spared_sent
    assert "worker-" in broker.log_tail() and "exited with -9; starting it again" in broker.log_tail()


def test_sigterm_stops_every_worker_cleanly(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    topics = list(topics_on_two_owners(broker.service_url, "stop"))
    client = client_factory(broker.service_url)
    for topic in topics:
        client.create_producer(topic).send(b"stored")
    pids = list(worker_pids(broker).values())
    assert broker.stop() == 0
    log = broker.log_text()
    assert log.count("stopped cleanly") == 3, log  # each worker, then the supervisor
    for pid in pids:
        assert not _alive(pid)


@pytest.mark.slow
def test_a_supervisor_killed_with_9_keeps_the_data_directory_locked_until_its_workers_flushed(
    broker_factory,
):
    """The workers notice their supervisor's death, flush and stop; until the last one has exited,
    no other broker can lock the data directory, and what they receipted is all there afterwards."""
    broker = broker_factory(WORKERS)
    topics = list(
        {owner: topic for topic, owner in topics_on_two_owners(broker.service_url, "orphan").items()}.values()
    )
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
    for topic in topics:
        client.subscribe(topic, "check").close()  # the messages stay for it
    producers = [  # sends that the dead workers never answer fail fast, so that sending stops
        client.create_producer(topic, batching_enabled=False, send_timeout_millis=1000) for topic in topics
    ]
    sending = [Sending(producer, topic[-8:]) for producer, topic in zip(producers, topics, strict=True)]
    eventually(lambda: all(s.count() >= 200 for s in sending), what="receipts before the kill")
    pids = list(worker_pids(broker).values())
    assert len(pids) == 2, broker.log_text()
    assert broker.proc is not None
    os.kill(broker.proc.pid, signal.SIGKILL)
    broker.proc.wait()

    alive_when_locked: list[int] = []

    def locked() -> bool:
        lock = DataDirLock(broker.data_dir)
        try:
            lock.acquire()
        except DataDirInUse:
            return False
        alive_when_locked.extend(pid for pid in pids if _alive(pid))
        lock.release()
        return True

    eventually(locked, interval=0.005, what="the data directory's lock free")
    assert not alive_when_locked, "the lock was free while these workers lived"
    receipted = [set(s.receipted) for s in sending]  # none can be receipted any more
    log = broker.log_text()
    assert log.count("its supervisor (pid") == 2 and log.count("stopped cleanly") == 2, log
    for s in sending:
        s.stop_now()
    client.close()

    broker.start()  # the same data directory: every receipted message is there
    reader_client = pulsar.Client(broker.service_url)
    try:
        for topic, want in zip(topics, receipted, strict=True):
            consumer = reader_client.subscribe(topic, "check")
            got: set[bytes] = set()
            while not want <= got:
                got.add(consumer.receive(15_000).data())
    finally:
        reader_client.close()


def test_a_worker_that_cannot_start_stops_the_broker_with_one_line(broker_factory, tmp_path):
    """The supervisor's checks pass (the files exist and are readable), but a worker cannot make
    its TLS context of a certificate that is no certificate."""
    bad = tmp_path / "not-a-certificate.pem"
    bad.write_text("not a certificate\n")
    settings = {
        **WORKERS,
        "broker_service_port_tls": 0,
        "tls_certificate_file_path": str(bad),
        "tls_key_file_path": str(bad),
    }
    with pytest.raises(BrokerProcessError) as failure:
        broker_factory(settings)
    assert failure.value.reason.startswith("worker-"), failure.value
    log = str(failure.value)
    assert log.count("cannot start:") == 1, log


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
