"""A second broker on the same data directory refuses to start; the first is untouched."""

from __future__ import annotations

import subprocess
import sys

import pulsar
import pytest

pytestmark = pytest.mark.interop


def second_broker(data_dir) -> subprocess.CompletedProcess[str]:
    """A broker started on ``data_dir`` (run to its end: it must refuse, not serve)."""
    return subprocess.run(
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
            str(data_dir),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_refused_for(broker, refused: subprocess.CompletedProcess[str]) -> None:
    """The second broker exited with an error naming the directory and the broker holding it."""
    assert refused.returncode == 1, refused.stderr
    holder = f"data directory {broker.data_dir} is in use by another broker (pid {broker.proc.pid})"
    assert holder in refused.stderr, refused.stderr
    assert "listening on" not in refused.stdout + refused.stderr, "it served before it refused"


def test_second_broker_on_the_same_data_dir_exits_with_a_clear_error(broker, client, topic):
    producer = client.create_producer(topic)
    producer.send(b"before")
    assert_refused_for(broker, second_broker(broker.data_dir))
    assert broker.running
    producer.send(b"after")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"before", b"after"]


@pytest.mark.slow
def test_the_lock_goes_with_the_process_even_after_kill9(broker, client_factory, topic):
    client_factory(broker.service_url).create_producer(topic).send(b"before")
    killed = broker.proc.pid
    broker.kill9()
    broker.restart(same_port=False)  # fails (the broker exits, refused) if the lock outlived the process
    assert broker.running and broker.proc.pid != killed
    client = client_factory(broker.service_url)
    client.create_producer(topic).send(b"after")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"before", b"after"]
    # The restarted broker holds the lock in its turn.
    assert_refused_for(broker, second_broker(broker.data_dir))
