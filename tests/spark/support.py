"""Producing, reading back and admin calls for the Spark tests (through our own client)."""

from __future__ import annotations

import json
import urllib.request

from magnetar.client import Client, MessageId, Timeout


def produce(
    client: Client, topic: str, values: list[str], batching: bool = False, keys: int = 3, **kwargs
) -> list[MessageId]:
    """Send ``values`` (key ``k<i % keys>``, property ``i``, event time 1_700_000_000_000 + i)."""
    producer = client.create_producer(topic, batching_enabled=batching, **kwargs)
    futures: list[MessageId | None] = [None] * len(values)

    def done(i):
        def callback(result, msg_id):
            futures[i] = msg_id

        return callback

    for i, value in enumerate(values):
        producer.send_async(
            value.encode(),
            done(i),
            partition_key=f"k{i % keys}",
            properties={"i": str(i)},
            event_timestamp=1_700_000_000_000 + i,
        )
    producer.flush()
    producer.close()
    assert all(f is not None for f in futures), "some sends got no receipt"
    return futures


def read_back(client: Client, topic: str) -> list:
    """Every message on ``topic`` (a partition or a plain topic), in order: read until the reader
    says nothing more is available."""
    reader = client.create_reader(topic, MessageId.earliest)
    messages = []
    try:
        while reader.has_message_available():
            try:
                messages.append(reader.read_next(10_000))
            except Timeout:
                raise AssertionError(f"an available message did not come after {len(messages)}") from None
        return messages
    finally:
        reader.close()


def admin(http_url: str, method: str, path: str, body=None):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        http_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
    return json.loads(text) if text.strip() else None


def source_options(broker, **more) -> dict[str, str]:
    given = {k: str(v) for k, v in more.items()}
    return {"service_url": broker.service_url, "admin_url": broker.http_url, **given}
