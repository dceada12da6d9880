"""``Standalone``: the broker and its HTTP port, started and stopped together in one process."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.request

import pytest

from magnetar.broker.config import HTTP_PORT_OFFSET, BrokerConfig
from magnetar.cli.standalone import Standalone
from tests.interop.conftest import BrokerProcess


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode()


def test_the_broker_and_its_http_port_serve_together_and_stop_together(tmp_path):
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)

    async def scenario():
        standalone = Standalone(config)
        await standalone.start()
        try:
            http = f"http://127.0.0.1:{standalone.admin.http_port}"
            assert await asyncio.to_thread(_get, f"{http}/admin/v2/brokers/health") == "ok"
            namespaces = json.loads(await asyncio.to_thread(_get, f"{http}/admin/v2/namespaces/public"))
            assert "public/default" in namespaces
            assert standalone.listening() == f"pulsar://127.0.0.1:{standalone.broker.port} and {http}"
        finally:
            await standalone.stop()
        with pytest.raises(OSError):
            await asyncio.to_thread(_get, f"{http}/admin/v2/brokers/health")

    asyncio.run(scenario())


def test_a_http_port_in_use_stops_the_broker_again(tmp_path):
    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=port)

    async def scenario():
        with pytest.raises(OSError):
            await Standalone(config).start()
        # The first broker let go of its data directory: another starts on it.
        config_free = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)
        again = Standalone(config_free)
        await again.start()
        await again.stop()

    try:
        asyncio.run(scenario())
    finally:
        taken.close()


def _port_pair_free() -> int:
    """A free port P whose HTTP port P + 1430 is free too (both bound once to check, then let go)."""
    for _ in range(50):
        with socket.create_server(("127.0.0.1", 0)) as first:
            port = first.getsockname()[1]
            if port + HTTP_PORT_OFFSET > 65535:
                continue
            try:
                with socket.create_server(("127.0.0.1", port + HTTP_PORT_OFFSET)):
                    return port
            except OSError:
                continue
    raise AssertionError("no free pair of ports found")


def test_two_brokers_given_only_their_port_both_start_and_serve_http(tmp_path):
    """``--port`` without ``--http-port``: the HTTP port is port + 1430 (6650 -> 8080), so a second
    broker does not fail on the first one's HTTP port, and each says where it listens."""
    brokers = [BrokerProcess(tmp_path / name, None) for name in ("a", "b")]
    try:
        for broker in brokers:
            port = _port_pair_free()
            broker.start(port=port, http_port=None)
            assert (broker.port, broker.http_port) == (port, port + HTTP_PORT_OFFSET)
            assert f"listening on pulsar://127.0.0.1:{port} and http://127.0.0.1:{port + 1430}" in (
                broker.log_text()
            )
        for broker in brokers:
            assert _get(f"{broker.http_url}/admin/v2/brokers/health") == "ok"
    finally:
        for broker in brokers:
            broker.close()
