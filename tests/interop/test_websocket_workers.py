"""The WebSocket API and REST produce with ``--workers 2``: a session or a request that reaches the
worker that does not own its topic is served by the owner (relayed, proxied), with the owner's ids."""

from __future__ import annotations

import base64
import json
import types
import urllib.request

import pytest
from websockets.sync.client import connect

from tests.interop.support import receive_n
from tests.interop.test_rest_produce import post
from tests.interop.test_websocket import next_message, payload_of, publish, ws_url
from tests.interop.test_workers import WORKERS, topics_on_two_owners

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def own_http_url(broker, topic: str) -> str:
    """The HTTP URL of the worker that owns ``topic`` (Pulsar's HTTP lookup names it)."""
    path = topic.replace("://", "/", 1)
    with urllib.request.urlopen(f"{broker.http_url}/lookup/v2/topic/{path}", timeout=10) as answer:
        return json.loads(answer.read())["httpUrl"]


def test_ws_and_rest_produce_on_the_other_workers_port_reach_the_owner(broker_factory, client_factory):
    broker = broker_factory(WORKERS)
    owners = topics_on_two_owners(broker.service_url, "ws")
    first, second = list({owner: topic for topic, owner in owners.items()}.values())
    for topic, other in ((first, second), (second, first)):
        # The worker that owns ``other``, not ``topic``: every call below is relayed or proxied.
        elsewhere = types.SimpleNamespace(http_url=own_http_url(broker, other))
        assert elsewhere.http_url != own_http_url(broker, topic)
        official = client_factory(broker.service_url).subscribe(topic, "official")
        with connect(ws_url(elsewhere, "consumer", topic, "ws")) as consumer:
            with connect(ws_url(elsewhere, "producer", topic)) as producer:
                ack = publish(producer, b"over a websocket")
            assert ack["result"] == "ok", ack
            status, answer = post(elsewhere, topic, {"messages": [{"payload": "over REST"}]})
            assert status == 200 and answer["messagePublishResults"][0]["errorCode"] == 0, answer
            assert [payload_of(next_message(consumer)) for _ in range(2)] == [
                b"over a websocket",
                b"over REST",
            ]
        first_message, second_message = receive_n(official, 2, ack=True)
        assert first_message.data() == b"over a websocket"
        assert base64.b64decode(ack["messageId"]) == first_message.message_id().serialize()
        ledger, entry, _ = answer["messagePublishResults"][0]["messageId"].split(":")
        assert (second_message.message_id().ledger_id(), second_message.message_id().entry_id()) == (
            int(ledger),
            int(entry),
        )
    assert "relayed to worker-" in broker.log_tail(200_000)
