"""A second broker on the same data directory refuses to start; the first is untouched."""

from __future__ import annotations

import subprocess
import sys

import pulsar
import pytest

pytestmark = pytest.mark.interop


def test_second_broker_on_the_same_data_dir_exits_with_a_clear_error(broker, client, topic):
    producer = client.create_producer(topic)
    producer.send(b"before")
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--port",
            "0",
            "--http-port",
            "0",
            "--data-dir",
            str(broker.data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 1
    assert "in use by another broker" in second.stderr
    producer.send(b"after")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"before", b"after"]


def test_the_lock_goes_with_the_process_even_after_kill9(broker, client_factory, topic):
    broker.kill9()
    broker.restart(same_port=False)  # would fail if the lock outlived the killed process
    client_factory(broker.service_url).create_producer(topic).send(b"fine")
