"""The metadata database is lost: the broker refuses to start and deletes nothing; ``magnetar repair``
rebuilds the metadata from the ledger files, and every message (and the subscription's acks) is back."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pulsar
import pytest

from magnetar.broker_process import BrokerProcessError

from .support import admin_call

pytestmark = [pytest.mark.interop, pytest.mark.slow]  # slow: restarts, repair runs


def _files(data_dir: Path) -> dict[str, bytes]:
    files = (data_dir / "ledgers").rglob("*")
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in files if p.is_file()}


def _repair(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", "repair", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_lost_metadata_refuses_to_start_and_repair_brings_every_message_back(broker, client_factory, topic):
    admin_call(broker, "PUT", "/admin/v2/tenants/acme", {"adminRoles": [], "allowedClusters": ["standalone"]})
    admin_call(broker, "PUT", "/admin/v2/namespaces/acme/prod")
    assert admin_call(broker, "PUT", "/admin/v2/persistent/acme/prod/p/partitions", 2)[0] == 204
    client = client_factory(broker.service_url)
    partitioned = client.create_producer("persistent://acme/prod/p", batching_enabled=False)
    for i in range(4):
        partitioned.send(b"p%d" % i, partition_key=str(i))
    other = topic + "-other"
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [f"m{i}".encode() for i in range(20)]
    for data in sent:
        producer.send(data)
    client.create_producer(other).send(b"other")
    for _ in range(5):
        consumer.acknowledge(consumer.receive(5000))
    client.close()
    assert broker.stop() == 0  # flushes the acks
    before = _files(broker.data_dir)
    for path in broker.data_dir.glob("metadata.sqlite*"):
        path.unlink()

    with pytest.raises(BrokerProcessError):
        broker.restart()
    log = broker.log_path.read_text()
    assert "refusing to start" in log and "magnetar repair --data-dir" in log
    assert _files(broker.data_dir) == before  # nothing deleted, nothing changed

    repaired = _repair(broker.data_dir)
    assert repaired.returncode == 0, repaired.stderr
    assert topic in repaired.stdout and other in repaired.stdout

    broker.restart()
    client = client_factory(broker.service_url)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in sent] == sent
    assert not reader.has_message_available()
    consumer = client.subscribe(topic, "sub")  # its acks came back from its cursor ledger
    assert consumer.receive(5000).data() == b"m5"
    assert client.create_reader(other, pulsar.MessageId.earliest).read_next(5000).data() == b"other"
    # The tenant, the namespace and the partitioned topic are back (the partitions found: 2).
    assert admin_call(broker, "GET", "/admin/v2/persistent/acme/prod/p/partitions") == (
        200,
        {"partitions": 2},
    )
    consumer = client.subscribe(
        "persistent://acme/prod/p", "s", initial_position=pulsar.InitialPosition.Earliest
    )
    assert sorted(consumer.receive(5000).data() for _ in range(4)) == [b"p0", b"p1", b"p2", b"p3"]


def test_repair_refuses_while_a_broker_holds_the_data_dir(broker, client, topic):
    client.create_producer(topic).send(b"x")
    repaired = _repair(broker.data_dir)
    assert repaired.returncode == 1
    assert "in use by another broker" in repaired.stderr
