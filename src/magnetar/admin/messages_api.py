"""Reading stored messages over Pulsar's admin v2 paths, without consuming them:
``pulsar-admin topics peek-messages`` (``.../subscription/{sub}/position/{n}``) and
``get-message-by-id`` (``.../ledger/{ledgerId}/entry/{entryId}``).

As in Pulsar, the answer is one entry: its payload, decompressed, as the body, and its
metadata as ``X-Pulsar-*`` headers. A batch comes whole (``X-Pulsar-num-batch-message``
says how many messages its body holds, in the batch format); the admin client splits it.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import persistent, reason_error, single_topic, translate_errors
from magnetar.broker.offloaded_reads import answered
from magnetar.protocol import ProtocolError, wire
from magnetar.protocol.compression import decompress
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import parse_metadata
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import PersistentTopic


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def entry_headers(
    position: Position, metadata: wire.MessageMetadata, broker: wire.BrokerEntryMetadata | None
) -> dict:
    """Pulsar's ``X-Pulsar-*`` headers for one stored entry."""
    headers = {
        "X-Pulsar-Message-ID": f"{position.ledger_id}:{position.entry_id}",
        "X-Pulsar-producer-name": metadata.producer_name,
        "X-Pulsar-sequence-id": str(metadata.sequence_id),
        "X-Pulsar-publish-time": _time(metadata.publish_time),
        "X-Pulsar-PROPERTY": json.dumps({kv.key: kv.value for kv in metadata.properties}),
    }
    optional = {
        "X-Pulsar-event-time": _time(metadata.event_time) if metadata.event_time else None,
        "X-Pulsar-deliver-at-time": (
            _time(metadata.deliver_at_time) if metadata.HasField("deliver_at_time") else None
        ),
        "X-Pulsar-num-batch-message": (
            str(metadata.num_messages_in_batch) if metadata.HasField("num_messages_in_batch") else None
        ),
        "X-Pulsar-partition-key": metadata.partition_key if metadata.HasField("partition_key") else None,
        "X-Pulsar-replicated-from": (
            metadata.replicated_from if metadata.HasField("replicated_from") else None
        ),
        "X-Pulsar-Base64-ordering-key": (
            base64.b64encode(metadata.ordering_key).decode() if metadata.HasField("ordering_key") else None
        ),
        "X-Pulsar-compression": (
            wire.CompressionType.Name(metadata.compression) if metadata.compression else None
        ),
        "X-Pulsar-uncompressed-size": str(metadata.uncompressed_size) if metadata.compression else None,
        "X-Pulsar-uuid": metadata.uuid if metadata.HasField("uuid") else None,
        "X-Pulsar-chunk-id": str(metadata.chunk_id) if metadata.HasField("chunk_id") else None,
        "X-Pulsar-num-chunks-from-msg": (
            str(metadata.num_chunks_from_msg) if metadata.HasField("num_chunks_from_msg") else None
        ),
        "X-Pulsar-total-chunk-msg-size": (
            str(metadata.total_chunk_msg_size) if metadata.HasField("total_chunk_msg_size") else None
        ),
    }
    if broker is not None:
        if broker.HasField("broker_timestamp"):
            optional["X-Pulsar-Broker-Entry-METADATA-timestamp"] = str(broker.broker_timestamp)
        if broker.HasField("index"):
            optional["X-Pulsar-Broker-Entry-METADATA-index"] = str(broker.index)
    headers.update((name, value) for name, value in optional.items() if value is not None)
    return headers


async def entry_response(topic: PersistentTopic, position: Position) -> web.Response:
    """The stored entry at ``position`` as Pulsar's admin API answers it (an offloaded one is
    fetched without blocking the loop; 503 at once while its store is known to fail)."""
    ml = topic.ml
    data = await answered(ml, lambda: ml.read_entry(position, wait=False).data, f"reading {position}")
    try:
        broker, producer_bytes = split_entry_metadata(data)
        metadata, payload = parse_metadata(producer_bytes)
        body = (
            decompress(metadata.compression, payload, metadata.uncompressed_size)
            if metadata.compression
            else bytes(payload)
        )
    except ProtocolError as exc:
        raise reason_error(
            web.HTTPInternalServerError, f"message {position} does not decode: {exc}"
        ) from None
    return web.Response(
        body=body, headers=entry_headers(position, metadata, broker), content_type="application/octet-stream"
    )


def add_routes(app: web.Application, service: BrokerService) -> None:
    def one_topic(request: web.Request) -> PersistentTopic:
        return persistent(single_topic(service, request, "persistent", "read its partitions"))

    @translate_errors
    async def peek(request: web.Request) -> web.Response:
        topic = one_topic(request)
        subscription = topic.subscription(request.match_info["subscription"])
        n = int(request.match_info["n"])
        if n < 1:
            raise ValueError("the message position counts from 1")
        position = subscription.nth_position(n)
        if position is None:
            raise reason_error(web.HTTPNotFound, "Message not found")
        return await entry_response(topic, position)

    @translate_errors
    async def by_id(request: web.Request) -> web.Response:
        topic = one_topic(request)
        position = Position(int(request.match_info["ledger"]), int(request.match_info["entry"]))
        if not topic.ml.has_entry(position):
            raise reason_error(web.HTTPNotFound, f"Message {position} not found")
        return await entry_response(topic, position)

    base = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_get(base + "/subscription/{subscription}/position/{n:-?[0-9]+}", peek)
    app.router.add_get(base + "/ledger/{ledger:[0-9]+}/entry/{entry:[0-9]+}", by_id)
