"""Broker-side deduplication by producer name and sequence id, and ordered receipts."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.protocol import wire
from magnetar.protocol.message_id import to_signed

from .support import RawConnection, read_stored
from .support import admin_call as call

pytestmark = pytest.mark.interop

RECEIPT = wire.BaseCommand.SEND_RECEIPT


def enable_dedup(broker, on: bool = True) -> None:
    assert call(broker, "POST", "/admin/v2/namespaces/public/default/deduplication", on)[0] == 204


def raw_producer(broker, topic: str, name: str) -> tuple[RawConnection, int]:
    raw = RawConnection(broker.port)
    raw.handshake()
    raw.send_command(wire.CommandProducer(topic=topic, producer_id=1, request_id=1, producer_name=name))
    success = raw.expect(wire.BaseCommand.PRODUCER_SUCCESS).body()
    return raw, success.last_sequence_id


def send_all(raw: RawConnection, name: str, sequences: list[int]) -> list[tuple[int, int, int]]:
    for seq in sequences:
        raw.send_message(1, name, seq, b"m%d" % seq)
    receipts = []
    for _ in sequences:
        body = raw.expect(RECEIPT).body()
        receipts.append(
            (body.sequence_id, to_signed(body.message_id.ledger_id), to_signed(body.message_id.entry_id))
        )
    return receipts


def stored(client, topic: str) -> list[bytes]:
    return [m.data() for m in read_stored(client.create_reader(topic, pulsar.MessageId.earliest))]


def test_resend_after_reconnect_stores_nothing_twice(broker, client, topic):
    enable_dedup(broker)
    raw, last = raw_producer(broker, topic, "dedup-producer")
    assert last == -1
    first = send_all(raw, "dedup-producer", [0, 1, 2, 3, 4])
    ledger = first[0][1]
    assert ledger >= 0 and first == [(i, ledger, i) for i in range(5)], "stored: entries 0 to 4"
    raw.close()

    raw, last = raw_producer(broker, topic, "dedup-producer")
    assert last == 4, "PRODUCER_SUCCESS tells the producer where it stopped"
    again = send_all(raw, "dedup-producer", [3, 4, 5])
    assert [r[0] for r in again] == [3, 4, 5], "receipts in send order"
    assert again[0][1:] == (-1, -1) and again[1][1:] == (-1, -1), "duplicates answered, not stored"
    assert again[2] == (5, ledger, 5), "stored: the next entry"
    raw.close()
    assert stored(client, topic) == [b"m%d" % i for i in range(6)]


def test_duplicates_are_stored_when_deduplication_is_off(broker, client, topic):
    raw, _ = raw_producer(broker, topic, "plain-producer")
    send_all(raw, "plain-producer", [0, 1])
    raw.close()
    raw, _ = raw_producer(broker, topic, "plain-producer")
    send_all(raw, "plain-producer", [1])
    raw.close()
    assert stored(client, topic) == [b"m0", b"m1", b"m1"]


def test_sequence_state_survives_kill9_and_the_official_producer_continues(broker, client_factory, topic):
    enable_dedup(broker)
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, producer_name="survivor", batching_enabled=False)
    for i in range(20):
        producer.send(b"%d" % i)
    assert producer.last_sequence_id() == 19
    broker.kill9()
    client.close()
    broker.restart(same_port=False)
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic, producer_name="survivor", batching_enabled=False)
    assert producer.last_sequence_id() == 19
    producer.send(b"20")
    raw, last = raw_producer(broker, topic + "-other", "x")  # a second topic is independent
    assert last == -1
    raw.close()
    assert stored(client, topic) == [b"%d" % i for i in range(21)]
