"""Fixture frames for the protocol tests.

``CLIENT_FRAMES`` are byte-for-byte what the official pulsar-client (C++ 4.2 inside
pulsar-client 3.13) sent to a fake broker; ``fixtures/capture.py`` regenerates them.
``BROKER_FRAMES`` are what a broker answers, built with our own encoder.
"""

from __future__ import annotations

import json
from pathlib import Path

from magnetar.protocol import FrameDecoder, wire
from magnetar.protocol.commands import message_id, ping, pong, success, wrap
from magnetar.protocol.entry import prepend_entry_metadata
from magnetar.protocol.frames import FRAME_OVERHEAD, Frame, encode_frame

MAX_MESSAGE_SIZE = 5 * 1024 * 1024
MAX_FRAME_SIZE = MAX_MESSAGE_SIZE + FRAME_OVERHEAD

_FIXTURES = Path(__file__).with_name("fixtures") / "client_frames.json"
CLIENT_FRAMES: dict[str, bytes] = {
    name: bytes.fromhex(raw) for name, raw in json.loads(_FIXTURES.read_text()).items()
}


def decode_one(raw: bytes) -> Frame:
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    decoder.feed(raw)
    frame = decoder.next_frame()
    assert frame is not None and decoder.next_frame() is None and decoder.buffered == 0
    return frame


def client_send_payload(name: str) -> bytes:
    """The headers-and-payload bytes of a captured SEND frame (``SEND-plain``, ``SEND-batched``...)."""
    payload = decode_one(CLIENT_FRAMES[name]).payload
    assert payload is not None
    return bytes(payload)


def _broker_frames() -> dict[str, bytes]:
    entry = client_send_payload("SEND-plain")
    stamped = prepend_entry_metadata(
        wire.BrokerEntryMetadata(broker_timestamp=1_700_000_000_123, index=41), entry
    )
    msg = wire.CommandMessage(consumer_id=3, message_id=message_id(7, 11), redelivery_count=2)
    batch_msg = wire.CommandMessage(consumer_id=3, message_id=message_id(7, 12), ack_set=[0b110])
    bodies = {
        "CONNECTED": wire.CommandConnected(
            server_version="magnetar", protocol_version=20, max_message_size=MAX_MESSAGE_SIZE
        ),
        "PARTITIONED_METADATA_RESPONSE": wire.CommandPartitionedTopicMetadataResponse(
            partitions=0, request_id=1, response=wire.CommandPartitionedTopicMetadataResponse.Success
        ),
        "LOOKUP_RESPONSE": wire.CommandLookupTopicResponse(
            broker_service_url="pulsar://127.0.0.1:6650",
            response=wire.CommandLookupTopicResponse.Connect,
            request_id=2,
            authoritative=True,
        ),
        "PRODUCER_SUCCESS": wire.CommandProducerSuccess(
            request_id=3, producer_name="standalone-0-1", last_sequence_id=-1
        ),
        "SEND_RECEIPT": wire.CommandSendReceipt(producer_id=0, sequence_id=5, message_id=message_id(7, 11)),
        "SEND_ERROR": wire.CommandSendError(
            producer_id=0, sequence_id=6, error=wire.ChecksumError, message="checksum mismatch"
        ),
        "ERROR": wire.CommandError(
            request_id=4, error=wire.ConsumerBusy, message="exclusive consumer is connected"
        ),
        "ACTIVE_CONSUMER_CHANGE": wire.CommandActiveConsumerChange(consumer_id=3, is_active=True),
        "GET_LAST_MESSAGE_ID_RESPONSE": wire.CommandGetLastMessageIdResponse(
            last_message_id=message_id(7, 12), request_id=5
        ),
        "CLOSE_CONSUMER": wire.CommandCloseConsumer(consumer_id=3, request_id=6),
        "ACK_RESPONSE": wire.CommandAckResponse(consumer_id=3, request_id=7),
    }
    frames = {name: encode_frame(wrap(body)) for name, body in bodies.items()}
    frames["SUCCESS"] = encode_frame(success(8))
    frames["PING"] = encode_frame(ping())
    frames["PONG"] = encode_frame(pong())
    frames["MESSAGE"] = encode_frame(wrap(msg), entry)
    frames["MESSAGE-entry-metadata"] = encode_frame(wrap(msg), stamped)
    frames["MESSAGE-batch"] = encode_frame(wrap(batch_msg), client_send_payload("SEND-batched"))
    return {f"broker-{name}": raw for name, raw in frames.items()}


BROKER_FRAMES = _broker_frames()
ALL_FRAMES: dict[str, bytes] = {**{f"client-{n}": raw for n, raw in CLIENT_FRAMES.items()}, **BROKER_FRAMES}
