"""``embedded_broker`` with the official pulsar-client: a real broker process, started and cleaned up."""

from __future__ import annotations

import json
import os
import re
import urllib.request

import pulsar
import pytest
from pulsar.exceptions import MessageTooBig

from magnetar.broker_process import BrokerProcessError
from magnetar.testing import embedded_broker
from tests.interop.conftest import CLIENT_LOGGER
from tests.interop.support import round_trip

TOPIC = "persistent://public/default/embedded-round-trip"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        return json.loads(response.read())


def test_round_trip_and_admin_then_nothing_is_left():
    with embedded_broker() as broker:
        assert broker.service_url.startswith("pulsar://127.0.0.1:")
        assert broker.admin_url.startswith("http://127.0.0.1:")
        assert broker.service_url.rsplit(":", 1)[1] != "6650"  # an ephemeral port, not the default
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
        try:
            assert round_trip(client, TOPIC, [b"one", b"two"]) == [b"one", b"two"]
        finally:
            client.close()
        assert TOPIC in _get_json(broker.admin_url + "/admin/v2/persistent/public/default")
        pid, data_dir = broker.pid, broker.data_dir
        assert _alive(pid) and data_dir.is_dir()
    assert not _alive(pid)  # stopped and reaped
    assert not data_dir.exists()
    assert not data_dir.parent.exists()  # the whole temporary directory, log included


def test_settings_reach_the_broker():
    limit = 128 * 1024
    with embedded_broker(max_message_size=limit) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
        try:
            producer = client.create_producer(TOPIC, batching_enabled=False)
            producer.send(b"x" * (limit // 2))
            with pytest.raises(MessageTooBig):  # the limit CONNECTED announced
                producer.send(b"x" * (limit + 1))
        finally:
            client.close()


def test_two_brokers_at_once_get_ports_of_their_own():
    with embedded_broker() as first, embedded_broker() as second:
        assert first.service_url != second.service_url
        assert first.admin_url != second.admin_url
        assert first.data_dir != second.data_dir


def test_an_unknown_setting_fails_the_start_naming_it():
    with pytest.raises(BrokerProcessError, match="no_such_setting"), embedded_broker(no_such_setting=1):
        pass


def test_an_error_in_the_block_still_stops_the_broker():
    with pytest.raises(RuntimeError, match="the test failed"), embedded_broker() as broker:
        pid, data_dir = broker.pid, broker.data_dir
        raise RuntimeError("the test failed")
    assert not _alive(pid)
    assert not data_dir.exists()


def test_workers_run_a_supervisor_and_its_workers_and_none_outlives_the_block():
    with embedded_broker(workers=2) as broker:
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=10, logger=CLIENT_LOGGER)
        try:
            topics = [f"{TOPIC}-{i}" for i in range(4)]
            for topic in topics:
                assert round_trip(client, topic, [b"one", b"two"]) == [b"one", b"two"]
        finally:
            client.close()
        assert set(topics) <= set(_get_json(broker.admin_url + "/admin/v2/persistent/public/default"))
        assert "(2 workers)" in broker.log_tail()
        workers = [int(pid) for pid in re.findall(r"worker-\d \(pid (\d+)\)", broker.log_tail())]
        assert len(workers) == 2
    assert not any(_alive(pid) for pid in workers)
