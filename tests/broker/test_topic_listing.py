"""A namespace's topics are listed off the event loop (GET_TOPICS_OF_NAMESPACE and the admin list),
so a namespace of 100,000 topics does not stall every other client while it is read and sorted.

The stored names' query is held on a gate: a PING sent meanwhile is answered first, and the listing
answers once the gate opens. With the listing on the loop the loop itself would wait on the gate
(until its timeout), and the listing would come before the PONG."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request

from magnetar.broker.config import BrokerConfig
from magnetar.broker.service import LISTING_THREAD
from magnetar.cli.standalone import Standalone
from magnetar.protocol import wire
from tests.interop.support import RawConnection

NAMESPACE = "public/default"
TOPICS = [f"persistent://{NAMESPACE}/device-{i}" for i in range(3)]
BASE = wire.BaseCommand


class Gate:
    """Holds ``storage.managed_ledger_names`` until ``open``; records the thread it was called on."""

    def __init__(self, storage) -> None:
        self._real = storage.managed_ledger_names
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.threads: list[str] = []
        storage.managed_ledger_names = self

    def __call__(self, prefix: str = "") -> list[str]:
        self.threads.append(threading.current_thread().name)
        self.entered.set()
        self.opened.wait(10)
        return self._real(prefix)


def run_with_broker(tmp_path, client_side) -> None:
    """``client_side(standalone, gate)`` runs on a thread while the broker serves on the loop."""
    config = BrokerConfig.load(None, data_dir=tmp_path / "data", port=0, http_port=0)

    async def scenario() -> None:
        standalone = Standalone(config)
        await standalone.start()
        try:
            storage = standalone.broker.storage
            for name in TOPICS:
                await asyncio.to_thread(storage.open_managed_ledger, name)
            await asyncio.to_thread(client_side, standalone, Gate(storage))
        finally:
            await standalone.stop()

    asyncio.run(scenario())


def pong_while_held(port: int, gate: Gate) -> None:
    """The listing is held: a PING on a connection of its own is answered meanwhile."""
    assert gate.entered.wait(10), "the listing did not start"
    other = RawConnection(port)
    try:
        other.handshake()
        other.send_command(wire.CommandPing())
        other.expect(BASE.PONG)
        assert not gate.opened.is_set()
    finally:
        other.close()


def test_get_topics_of_namespace_is_listed_off_the_loop(tmp_path):
    def client_side(standalone: Standalone, gate: Gate) -> None:
        raw = RawConnection(standalone.broker.port)
        try:
            raw.handshake()
            raw.send_command(wire.CommandGetTopicsOfNamespace(request_id=1, namespace=NAMESPACE))
            assert gate.entered.wait(10)
            raw.send_command(wire.CommandPing())
            raw.expect(BASE.PONG)  # the loop served this connection while the listing was held
            gate.opened.set()
            listed = raw.expect(BASE.GET_TOPICS_OF_NAMESPACE_RESPONSE, timeout=10).body()
            assert list(listed.topics) == TOPICS and listed.topics_hash
            assert all(name.startswith(LISTING_THREAD) for name in gate.threads), gate.threads
        finally:
            gate.opened.set()
            raw.close()

    run_with_broker(tmp_path, client_side)


def test_the_admin_topic_list_is_listed_off_the_loop(tmp_path):
    def client_side(standalone: Standalone, gate: Gate) -> None:
        url = f"http://127.0.0.1:{standalone.admin.http_port}/admin/v2/persistent/{NAMESPACE}"
        answers: list[list[str]] = []
        asking = threading.Thread(
            target=lambda: answers.append(json.loads(urllib.request.urlopen(url, timeout=20).read()))
        )
        asking.start()
        try:
            pong_while_held(standalone.broker.port, gate)
        finally:
            gate.opened.set()
            asking.join(20)
        assert answers == [TOPICS]
        assert all(name.startswith(LISTING_THREAD) for name in gate.threads), gate.threads

    run_with_broker(tmp_path, client_side)
