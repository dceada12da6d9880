"""Tiered storage with the official client: a broker process offloading closed ledgers to a
directory (the filesystem driver) or to a real S3 protocol server (moto), consumers, readers and
seeks reading them back as if local, the admin API's offload and status, deletion, kill -9 during an
offload and the store unreachable."""

from __future__ import annotations

import contextlib
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pulsar
import pytest

from tests.interop.support import admin_call
from tests.offload.conftest import objects
from tests.offload.s3_server import BUCKET, S3Server
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]

#: A few messages per ledger, every message read from the tiers (no entry cache).
SMALL_LEDGERS = {
    "max_ledger_size_bytes": 2048,
    "entry_cache_bytes": 0,
    "managed_ledger_offload_check_interval_seconds": 0.2,
    "managed_ledger_offload_read_retry_seconds": 0.5,
}
#: Each ledger offloaded once it closes, its local copy deleted at once.
AT_ONCE = {"managed_ledger_offload_threshold_in_bytes": 0, "managed_ledger_offload_deletion_lag_ms": 0}


def _admin(topic: str, suffix: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/") + suffix


def _internal(broker, topic: str) -> dict:
    status, stats = admin_call(broker, "GET", _admin(topic, "/internalStats"))
    assert status == 200, stats
    return stats


def _local_logs(broker) -> int:
    return sum(1 for p in (broker.data_dir / "ledgers").rglob("*.log") if p.parent.name != "cursors")


def _produce(client, topic: str, count: int) -> list[pulsar.MessageId]:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"frame-{i:04d}".encode().ljust(200, b".")) for i in range(count)]
    producer.close()
    return ids


def _read_all(client, topic: str, count: int) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(timeout_millis=20_000).data() for _ in range(count)]
    assert not reader.has_message_available()
    reader.close()
    return got


def _expected(count: int) -> list[bytes]:
    return [f"frame-{i:04d}".encode().ljust(200, b".") for i in range(count)]


def _all_offloaded(broker, topic: str, keeping_local: bool = False) -> dict:
    """The internal stats once every closed ledger is offloaded, and its local copy gone (or kept)."""
    stats = _internal(broker, topic)
    closed = stats["ledgers"][:-1]
    assert closed and all(ledger["offloaded"] and ledger["local"] == keeping_local for ledger in closed), (
        closed
    )
    return stats


def _to_a_directory(uri: str, **more) -> dict:
    """SMALL_LEDGERS offloaded by the filesystem driver to ``uri`` (a path or a file:// URI)."""
    return {**SMALL_LEDGERS, "managed_ledger_offload_driver": "filesystem", "file_system_uri": uri, **more}


def _offloading_at_once(broker_factory, client_factory, store):
    """A broker offloading each ledger to ``store`` once it closes, its local copy deleted at
    once, and a client of it."""
    broker = broker_factory(_to_a_directory(f"file://{store}", **AT_ONCE))
    return broker, client_factory(broker.service_url)


def test_offloaded_by_threshold_and_read_back_by_readers_consumers_and_seeks(
    broker_factory, client_factory, topic, tmp_path
):
    store = tmp_path / "offloaded"
    broker, client = _offloading_at_once(broker_factory, client_factory, store)
    before = int(time.time() * 1000)
    _produce(client, topic, 60)
    stats = eventually(
        lambda: _all_offloaded(broker, topic), what="every closed ledger offloaded, local copy gone"
    )
    assert len(stats["ledgers"]) > 4 and _local_logs(broker) == 1  # the open ledger alone is local
    assert len(objects(store)) == len(stats["ledgers"]) - 1
    status, topic_stats = admin_call(broker, "GET", _admin(topic, "/stats"))
    assert topic_stats["offloadedStorageSize"] == sum(ledger["size"] for ledger in stats["ledgers"][:-1])

    assert _read_all(client, topic, 60) == _expected(60)
    metrics = urllib.request.urlopen(broker.http_url + "/metrics", timeout=10).read().decode()
    offloaded_bytes = re.search(r"^brk_ledgeroffloader_offload_bytes_total (\S+)$", metrics, re.M)
    objects_bytes = sum(ledger["size"] + 8 * ledger["entries"] for ledger in stats["ledgers"][:-1])
    assert offloaded_bytes and float(offloaded_bytes.group(1)) == objects_bytes  # each log and its index
    read_back = re.search(r"^brk_ledgeroffloader_read_offload_bytes_total (\S+)$", metrics, re.M)
    assert read_back and float(read_back.group(1)) > 0
    consumer = client.subscribe(topic, "from-the-start", initial_position=pulsar.InitialPosition.Earliest)
    got = [consumer.receive(20_000) for _ in range(60)]
    assert [m.data() for m in got] == _expected(60)
    for message in got:
        consumer.acknowledge(message)
    # seek by time and by message id into offloaded ledgers
    consumer.seek(got[25].publish_timestamp())
    assert consumer.receive(20_000).data() == _expected(60)[25]
    consumer.seek(got[7].message_id())  # the C++ client's seek is exclusive of the given message
    assert consumer.receive(20_000).data() == _expected(60)[8]
    consumer.close()
    assert got[0].publish_timestamp() >= before

    broker.stop()
    broker.start()
    client = client_factory(broker.service_url)
    assert _read_all(client, topic, 60) == _expected(60)
    # deleting the topic deletes its objects
    status, body = admin_call(broker, "DELETE", _admin(topic, "") + "?force=true")
    assert status == 204, body
    eventually(lambda: objects(store) == [], what="the deleted topic's objects deleted")


def test_offload_by_the_admin_api_up_to_a_message_id(broker_factory, client_factory, topic, tmp_path):
    broker = broker_factory(_to_a_directory(str(tmp_path / "o")))
    client = client_factory(broker.service_url)
    _produce(client, topic, 40)
    status, body = admin_call(broker, "GET", _admin(topic, "/offload"))
    assert status == 200 and body["status"] == "NOT_RUN", body
    ledgers = _internal(broker, topic)["ledgers"]
    up_to = ledgers[-2]["ledgerId"]  # everything before the last closed ledger
    status, body = admin_call(
        broker, "PUT", _admin(topic, "/offload"), {"ledgerId": up_to, "entryId": 0, "partitionIndex": -1}
    )
    assert status == 204, body

    def done():
        status, body = admin_call(broker, "GET", _admin(topic, "/offload"))
        assert status == 200 and body["status"] == "SUCCESS", body
        return body

    body = eventually(done, what="the offload to succeed")
    assert body["firstUnoffloadedMessage"] == {"ledgerId": up_to, "entryId": 0, "partitionIndex": -1}
    offloaded = [ledger["offloaded"] for ledger in _internal(broker, topic)["ledgers"]]
    assert offloaded == [True] * (len(ledgers) - 2) + [False, False]
    # the default deletion lag (4 h) keeps the local copies; reads use them meanwhile
    assert _local_logs(broker) == len(ledgers)
    assert _read_all(client, topic, 40) == _expected(40)


def _s3_config(s3: S3Server, tmp_path, **more) -> dict:
    credentials = tmp_path / "credentials"
    credentials.write_text("access_key_id=magnetar\nsecret_access_key=secret-in-a-file\n")
    return {
        **SMALL_LEDGERS,
        "managed_ledger_offload_driver": "aws-s3",
        "managed_ledger_offload_bucket": BUCKET,
        "managed_ledger_offload_region": "us-east-1",
        "managed_ledger_offload_service_endpoint": s3.endpoint,
        "managed_ledger_offload_credentials_file": str(credentials),
        "managed_ledger_offload_timeout_seconds": 1.0,
        **more,
    }


@contextlib.contextmanager
def _an_upload_hanging(broker, topic: str, s3: S3Server) -> Iterator[str]:
    """The store paused and an offload by the admin API of every closed ledger of ``topic`` under
    way; yields the offload key of the first one's attempt. The store answers again on exit."""
    ledgers = _internal(broker, topic)["ledgers"]
    s3.pause()  # the upload hangs
    try:
        status, body = admin_call(
            broker, "PUT", _admin(topic, "/offload"), {"ledgerId": ledgers[-1]["ledgerId"], "entryId": 0}
        )
        assert status == 204, body

        def attempt_recorded():
            first = _internal(broker, topic)["ledgers"][0]
            assert first.get("offloadState") == "offloading", first
            return first["offloadKey"]

        yield eventually(attempt_recorded, what="an upload under way")
    finally:
        s3.resume()


def _restarted_offloading(broker, client_factory, topic: str):
    """The stopped ``broker`` started again, offloading by threshold now: a client of it and the
    closed ledgers of ``topic`` once every one is offloaded."""
    broker.config = {**broker.config, "managed_ledger_offload_threshold_in_bytes": 0}
    broker.start()
    client = client_factory(broker.service_url)

    def offloaded_again():
        closed = _internal(broker, topic)["ledgers"][:-1]
        assert all(ledger["offloaded"] for ledger in closed), closed
        return closed

    return client, eventually(offloaded_again, what="the ledgers offloaded again after the restart")


def test_kill_9_during_an_offload_to_s3_leaves_nothing_counted_and_it_is_done_again(
    broker_factory, client_factory, topic, tmp_path, s3
):
    broker = broker_factory(_s3_config(s3, tmp_path, managed_ledger_offload_timeout_seconds=30.0))
    client = client_factory(broker.service_url)
    _produce(client, topic, 30)
    with _an_upload_hanging(broker, topic, s3):
        broker.kill9()
    client, closed = _restarted_offloading(broker, client_factory, topic)
    assert _read_all(client, topic, 30) == _expected(30)
    assert "secret-in-a-file" not in broker.log_text()
    assert all(ledger.get("offloadState") == "offloaded" for ledger in closed)


def test_an_unreachable_store_fails_offloaded_reads_clearly_while_local_topics_go_on(
    broker_factory, client_factory, topic, tmp_path, s3
):
    broker = broker_factory(_s3_config(s3, tmp_path, **AT_ONCE))
    client = client_factory(broker.service_url)
    ids = _produce(client, topic, 30)
    eventually(lambda: _all_offloaded(broker, topic), what="offloaded, local copies gone")
    s3.pause()
    try:
        # an admin read of an offloaded entry: a clear error, at once
        ledger, entry = ids[0].ledger_id(), ids[0].entry_id()
        status, body = admin_call(broker, "GET", _admin(topic, f"/ledger/{ledger}/entry/{entry}"))
        assert status == 503 and "object store" in body["reason"], body
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        with pytest.raises(pulsar.Timeout):
            reader.read_next(timeout_millis=1500)
        # a local topic goes on meanwhile
        other = topic + "-local"
        consumer = client.subscribe(other, "s")
        _produce(client, other, 5)
        assert [consumer.receive(5000).data() for _ in range(5)] == _expected(5)
    finally:
        s3.resume()
    assert [reader.read_next(timeout_millis=20_000).data() for _ in range(30)] == _expected(30)
    assert "reading offloaded data failed" in broker.log_text()


def test_offload_by_age_takes_the_ledgers_closed_that_long_ago(
    broker_factory, client_factory, topic, tmp_path
):
    # the broker's threshold: an hour
    broker = broker_factory(
        _to_a_directory(str(tmp_path / "o"), managed_ledger_offload_threshold_in_seconds=3600)
    )
    client = client_factory(broker.service_url)
    _produce(client, topic, 40)
    status, body = admin_call(broker, "GET", _admin(topic, "/offloadPolicies?applied=true"))
    assert status == 200 and body["managedLedgerOffloadThresholdInSeconds"] == 3600, body
    # The namespace's offloadThresholdInSeconds: a ledger goes a second after its close, whatever
    # its size (no size threshold is set).
    namespace = "/admin/v2/namespaces/public/default/offloadThresholdInSeconds"
    assert admin_call(broker, "PUT", namespace, 1)[0] == 204
    assert admin_call(broker, "GET", namespace) == (200, 1)
    stats = eventually(
        lambda: _all_offloaded(broker, topic, keeping_local=True), what="the closed ledgers offloaded"
    )
    assert len(stats["ledgers"]) > 4
    status, body = admin_call(broker, "GET", _admin(topic, "/offloadPolicies?applied=true"))
    assert (
        body["managedLedgerOffloadThresholdInSeconds"] == 1
        and body["managedLedgerOffloadThresholdInBytes"] == -1
    ), body
    assert _read_all(client, topic, 40) == _expected(40)


def test_repair_after_the_metadata_is_lost_finds_the_ledgers_only_the_store_holds(
    broker_factory, client_factory, topic, tmp_path
):
    store = tmp_path / "offloaded"
    broker, client = _offloading_at_once(broker_factory, client_factory, store)
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    _produce(client, topic, 40)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(20_000))
    offloaded = len(eventually(lambda: _all_offloaded(broker, topic), what="offloaded")["ledgers"]) - 1
    client.close()
    assert broker.stop() == 0
    for path in broker.data_dir.glob("metadata.sqlite*"):
        path.unlink()

    command = [sys.executable, "-m", "magnetar", "repair", "--config", str(broker.config_path)]
    repaired = subprocess.run(
        [*command, "--data-dir", str(broker.data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert repaired.returncode == 0, repaired.stderr
    assert f"{offloaded} in the object store only" in repaired.stdout, repaired.stdout

    broker.start()
    client = client_factory(broker.service_url)
    assert _read_all(client, topic, 40) == _expected(40)
    stats = _internal(broker, topic)
    assert [ledger["offloaded"] for ledger in stats["ledgers"]] == [True] * offloaded + [False]
    consumer = client.subscribe(topic, "sub")  # its acks came back from its cursor ledger
    assert consumer.receive(20_000).data() == _expected(40)[10]


def test_a_stopping_broker_gives_up_an_upload_under_way_and_does_it_again_after_the_restart(
    broker_factory, client_factory, topic, tmp_path, s3
):
    # A store that hangs: each request waits up to a minute, far past a broker's stop.
    broker = broker_factory(_s3_config(s3, tmp_path, managed_ledger_offload_timeout_seconds=60.0))
    client = client_factory(broker.service_url)
    _produce(client, topic, 30)
    with _an_upload_hanging(broker, topic, s3) as given_up:
        client.close()
        assert broker.stop(timeout=10) == 0  # SIGTERM: not held up by the upload
    assert "still inside a request to the object store; the broker stops without" in broker.log_text()
    client, closed = _restarted_offloading(broker, client_factory, topic)
    assert given_up not in {ledger["offloadKey"] for ledger in closed}  # under a new key
    assert _read_all(client, topic, 30) == _expected(30)
    eventually(lambda: not s3.exists(given_up), what="the attempt given up deleted from the store")
