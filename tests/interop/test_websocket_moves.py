"""WebSocket producers, consumers and readers outlive the end of their topic where they were
attached, as Pulsar's do (its WebSocket service's Java client reconnects): with ``--workers 2``,
the worker that owns the topic is killed with -9 under a WebSocket producer, consumer and reader
served by the other worker, and a bundle is unloaded under them. The WebSockets stay open, every
receipted message arrives, and a send not receipted before the move is sent again (deduplication
on: stored once) or answered with an error (off: it may or may not be stored), never lost in
silence."""

from __future__ import annotations

import base64
import collections
import json
import os
import signal
import threading
import types

import pulsar
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from magnetar.client.admin import AdminClient
from tests.interop.test_websocket import ws_url
from tests.interop.test_websocket_workers import own_http_url
from tests.interop.test_workers import WORKERS, topics_on_two_owners
from tests.interop.test_workers_faults import SERVING, worker_pids
from tests.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow]

#: What a send answered with an error after a move says (deduplication off).
MAY_OR_MAY_NOT = "may or may not be stored"


class WsSending:
    """A WebSocket producer sending without pause, at most ``window`` sends unanswered; the
    answers by message number, and how its WebSocket ended if it did."""

    def __init__(self, ws: ClientConnection, prefix: str, window: int = 20) -> None:
        self.ws = ws
        self.prefix = prefix
        self.sent = 0
        self.answers: dict[int, dict] = {}
        self.closed: list[ConnectionClosed] = []
        self._room = threading.Semaphore(window)
        self._stop = threading.Event()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._sender = threading.Thread(target=self._send, daemon=True)
        self._receiver = threading.Thread(target=self._receive, daemon=True)
        self._receiver.start()
        self._sender.start()

    def payload(self, number: int) -> bytes:
        return f"{self.prefix}-{number}".encode()

    def _send(self) -> None:
        while not self._stop.is_set() and not self.closed:
            if not self._room.acquire(timeout=0.1):
                continue
            payload = base64.b64encode(self.payload(self.sent)).decode()
            try:
                self.ws.send(json.dumps({"payload": payload, "context": str(self.sent)}))
            except ConnectionClosed:
                return
            self.sent += 1

    def _receive(self) -> None:
        try:
            while True:
                answer = json.loads(self.ws.recv())
                with self._lock:
                    self.answers[int(answer["context"])] = answer
                self._room.release()
        except ConnectionClosed as exc:
            if not self.stopped.is_set():
                self.closed.append(exc)

    def receipted(self) -> list[bytes]:
        with self._lock:
            return [self.payload(n) for n, a in sorted(self.answers.items()) if a["result"] == "ok"]

    def failed(self) -> dict[int, dict]:
        with self._lock:
            return {n: a for n, a in self.answers.items() if a["result"] != "ok"}

    def stop(self) -> None:
        """Stop sending, and wait for the answers of everything sent."""
        self._stop.set()
        self._sender.join(30)
        eventually(lambda: len(self.answers) == self.sent or self.closed, what="every send answered")
        self.stopped.set()
        self.ws.close()
        self._receiver.join(30)


class WsReceiving:
    """A WebSocket consumer that acknowledges what it gets: the payloads, and how it ended if it did."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.got: collections.Counter[bytes] = collections.Counter()
        self.closed: list[ConnectionClosed] = []
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                message = json.loads(self.ws.recv())
                with self._lock:
                    self.got[base64.b64decode(message["payload"])] += 1
                self.ws.send(json.dumps({"messageId": message["messageId"]}))
        except ConnectionClosed as exc:
            if not self.stopped.is_set():
                self.closed.append(exc)

    def has(self, payloads: list[bytes]) -> bool:
        with self._lock:
            return all(self.got[p] for p in payloads)

    def close(self) -> None:
        self.stopped.set()
        self.ws.close()
        self._thread.join(30)


@pytest.mark.parametrize("deduplication", [True, False], ids=["dedup", "no-dedup"])
def test_ws_producer_and_consumer_outlive_a_kill_9_of_the_topics_owner(
    broker_factory, client_factory, deduplication
):
    broker = broker_factory({**WORKERS, "deduplication_enabled": deduplication})
    owners = topics_on_two_owners(broker.service_url, "wsmove")
    by_owner = {owner: topic for topic, owner in owners.items()}
    (victim_url, topic), (_, other) = sorted(by_owner.items())
    # Served by the worker that does not own ``topic``: through a Pulsar connection to its owner.
    elsewhere = types.SimpleNamespace(http_url=own_http_url(broker, other))
    with (
        connect(ws_url(elsewhere, "consumer", topic, "sub")) as consumer_ws,
        connect(ws_url(elsewhere, "reader", topic, messageId="earliest")) as reader_ws,
        connect(ws_url(elsewhere, "producer", topic)) as producer_ws,
    ):
        consumer, reader = WsReceiving(consumer_ws), WsReceiving(reader_ws)
        sending = WsSending(producer_ws, "m")
        eventually(lambda: len(sending.receipted()) >= 100, what="receipts before the kill")
        os.kill(worker_pids(broker)[victim_url], signal.SIGKILL)
        eventually(
            lambda: len(SERVING.findall(broker.log_text())) == 3, what="the killed worker started again"
        )
        mark = len(sending.receipted())
        eventually(lambda: len(sending.receipted()) >= mark + 100, timeout=60, what="receipts after the kill")
        sending.stop()
        receipted = sending.receipted()
        for receiving in (consumer, reader):
            eventually(lambda r=receiving: r.has(receipted), timeout=60, what="every receipted message")
            receiving.close()
    assert sending.closed == consumer.closed == reader.closed == [], "a WebSocket ended"
    # The reader went on after the last message it handed out: none came twice.
    assert [p for p, n in reader.got.items() if n > 1] == []
    failed = sending.failed()
    if deduplication:
        assert failed == {}, failed
    else:
        assert all(MAY_OR_MAY_NOT in a["errorMsg"] for a in failed.values()), failed
    log = broker.log_tail(200_000)
    assert "exited with -9; starting it again" in log and "attached again" in log
    if deduplication:  # each receipted message is stored once, resent or not
        reader = client_factory(broker.service_url).create_reader(topic, pulsar.MessageId.earliest)
        stored: collections.Counter[bytes] = collections.Counter()
        while not all(stored[p] for p in receipted):
            stored[reader.read_next(15_000).data()] += 1
        assert [p for p, n in stored.items() if n > 1] == []


def test_ws_producer_and_consumer_outlive_a_bundle_unload(broker_factory):
    """Unloaded under a WebSocket producer and consumer served by the topic's owner: the bundle
    goes to a worker (the same or the other), and both attach there again."""
    broker = broker_factory({**WORKERS, "deduplication_enabled": True})
    topic = next(iter(topics_on_two_owners(broker.service_url, "wsunload")))
    owner = types.SimpleNamespace(http_url=own_http_url(broker, topic))
    admin = AdminClient(broker.http_url)
    with (
        connect(ws_url(owner, "consumer", topic, "sub")) as consumer_ws,
        connect(ws_url(owner, "producer", topic)) as producer_ws,
    ):
        consumer, sending = WsReceiving(consumer_ws), WsSending(producer_ws, "u")
        eventually(lambda: len(sending.receipted()) >= 50, what="receipts before the unload")
        admin.namespaces.unload_namespace_bundle("public/default", admin.lookups.get_bundle_range(topic))
        mark = len(sending.receipted())
        eventually(
            lambda: len(sending.receipted()) >= mark + 50, timeout=60, what="receipts after the unload"
        )
        sending.stop()
        receipted = sending.receipted()
        eventually(
            lambda: consumer.has(receipted), timeout=60, what="every receipted message at the consumer"
        )
        consumer.close()
    assert sending.closed == [] and consumer.closed == [], "a WebSocket ended"
    assert sending.failed() == {}
