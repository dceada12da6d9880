"""A service URL pointing at the broker's HTTP (admin) port fails at once, saying so, instead of
reading ``HTTP/1.1`` as a frame of 1213486160 bytes (or retrying until the operation timeout)."""

from __future__ import annotations

import time

import pytest

from magnetar.client import HttpPortError


def test_http_port_is_named_not_read_as_a_frame(broker, magnetar_factory, topic):
    client = magnetar_factory(f"pulsar://127.0.0.1:{broker.http_port}", operation_timeout_seconds=30)
    started = time.monotonic()
    with pytest.raises(HttpPortError, match=r"answered with HTTP .*admin port\? .*usually on 6650") as raised:
        client.create_producer(topic)
    assert "HTTP/1." in str(raised.value)  # the status line the server sent
    assert time.monotonic() - started < 10, "an HTTP answer is not worth retrying until the timeout"
    assert not raised.value.retriable
