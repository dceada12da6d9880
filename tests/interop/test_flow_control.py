"""Flow control on sends (Pulsar's maxPendingPublishRequestsPerConnection and publish buffer).

A connection with too many sends awaiting receipts, or a broker whose pending sends hold
too many bytes, is not read until they drain; the client is held back by TCP, every send is
still stored and receipted in order, and ``/metrics`` shows the holds.
"""

from __future__ import annotations

import threading

import pulsar

from magnetar.protocol import wire

from .support import RawConnection, receive_n, scrape, send_frame


def holds(samples, reason: str) -> float:
    return samples[("magnetar_connection_holds_total", (("reason", reason),))]


def payload(seq: int, size: int) -> bytes:
    return b"%08d" % seq + b"%d" % size * size


def burst(raw: RawConnection, producer_name: str, count: int, size: int) -> threading.Thread:
    """Write ``count`` SENDs in one go, from a thread (the broker may stop reading us midway)."""
    data = b"".join(send_frame(1, producer_name, seq, payload(seq, size)) for seq in range(count))
    writer = threading.Thread(target=raw.sock.sendall, args=(data,))
    writer.start()
    return writer


def receipts(raw: RawConnection, count: int) -> list[tuple[int, int, int]]:
    out = []
    while len(out) < count:
        body = raw.expect(wire.BaseCommand.SEND_RECEIPT, timeout=30).body()
        out.append((body.sequence_id, body.message_id.ledger_id, body.message_id.entry_id))
    return out


def test_a_connection_with_too_many_pending_sends_is_not_read_until_half_are_receipted(
    broker_factory, client_factory, topic
):
    # fsyncs on the fsync thread: receipts come in later loop passes, other connections' reads between.
    broker = broker_factory({"max_pending_publish_requests_per_connection": 20, "fsync_inline_max_ms": 0})
    client = client_factory(broker.service_url)
    assert holds(scrape(broker), "pending_sends") == 0
    consumers = [client.subscribe(f"{topic}-{n}", "sub") for n in range(2)]
    # Two connections at once: while one waits, the other's reads reuse the broker's read
    # buffer, and the frames the first has read but not handled must come through intact.
    raws, names = [], []
    for n in range(2):
        raw = RawConnection(broker.port)
        raw.handshake()
        names.append(raw.create_producer(f"{topic}-{n}"))
        raws.append(raw)
    writers = [
        burst(raw, name, 3000, 100 + 37 * n) for n, (raw, name) in enumerate(zip(raws, names, strict=True))
    ]
    for raw in raws:
        got = receipts(raw, 3000)
        # Every send stored once, receipted in order, with ascending message ids.
        assert [seq for seq, _, _ in got] == list(range(3000))
        positions = [(ledger, entry) for _, ledger, entry in got]
        assert positions == sorted(set(positions))
    for writer in writers:
        writer.join(10)
    for n, consumer in enumerate(consumers):
        messages = receive_n(consumer, 3000, timeout_ms=30_000)
        assert [m.data() for m in messages] == [payload(seq, 100 + 37 * n) for seq in range(3000)]

    samples = scrape(broker)
    # One read brings far more than 20 SENDs: the connections stopped being read, many times.
    assert holds(samples, "pending_sends") > 2
    assert samples[("pulsar_broker_throttled_connections", ())] == 0  # and are read again now
    assert samples[("magnetar_publish_buffer_bytes", ())] == 0
    for raw in raws:
        raw.close()


def test_the_broker_wide_publish_buffer_holds_every_connection_and_loses_nothing(
    broker_factory, client_factory, topic
):
    broker = broker_factory(
        {
            "max_pending_publish_requests_per_connection": 0,
            "max_message_publish_buffer_bytes": 64 * 1024,
        }
    )
    client = client_factory(broker.service_url)
    raws, writers = [], []
    for n in range(2):
        raw = RawConnection(broker.port)
        raw.handshake()
        name = raw.create_producer(f"{topic}-{n}")
        raws.append(raw)
        writers.append(burst(raw, name, 1000, 1024 + n))
    for raw in raws:
        assert [seq for seq, _, _ in receipts(raw, 1000)] == list(range(1000))
    for writer in writers:
        writer.join(10)

    # Someone connecting now is served as usual.
    producer = client.create_producer(f"{topic}-late")
    producer.send(b"late")

    samples = scrape(broker)
    assert samples[("magnetar_publish_buffer_full_total", ())] > 0
    assert holds(samples, "publish_buffer") > 0
    assert holds(samples, "pending_sends") == 0  # no per-connection limit in this test
    assert samples[("pulsar_broker_throttled_connections_global_limit", ())] == 0
    assert samples[("magnetar_publish_buffer_bytes", ())] == 0
    for n in range(2):
        reader = client.create_reader(f"{topic}-{n}", pulsar.MessageId.earliest)
        messages = [reader.read_next(10_000) for _ in range(1000)]
        assert [m.data() for m in messages] == [payload(seq, 1024 + n) for seq in range(1000)]
    for raw in raws:
        raw.close()


def test_the_official_client_produces_through_a_small_pending_limit(broker_factory, client_factory, topic):
    broker = broker_factory({"max_pending_publish_requests_per_connection": 5})
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=2000)
    done = []
    for seq in range(2000):
        producer.send_async(b"%08d" % seq, lambda result, msg_id: done.append(result))
    producer.flush()
    assert done == [pulsar.Result.Ok] * 2000
    messages = receive_n(consumer, 2000, timeout_ms=30_000)
    assert [m.data() for m in messages] == [b"%08d" % seq for seq in range(2000)]
    assert holds(scrape(broker), "pending_sends") > 0
