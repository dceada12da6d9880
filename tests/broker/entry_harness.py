"""A broker "process" without a network for the entry-metadata tests: real storage under tmp_path.

``Harness`` owns an event loop, a Storage and PersistentTopics built from a BrokerConfig;
``publish`` stores producer bytes through ``PersistentTopic.publish`` exactly as a SEND does.
``crash`` abandons the process the way kill -9 does (no flush, no close: what was written to
the files stays, the state snapshot stays as last flushed); a new Harness on the same data
directory plays the restarted broker.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass
from pathlib import Path

from magnetar.broker import startup
from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.entry import split_entry_metadata
from magnetar.protocol.headers import encode_headers_and_payload
from magnetar.protocol.topic_name import TopicName
from magnetar.storage import Position, Storage
from magnetar.storage.record import HEADER, checksum

TOPIC = "persistent://public/default/entry-meta"


@dataclass
class FakeProducer:  # all PersistentTopic.publish reads of a producer
    name: str = "prod"
    deduplicated: bool = False  # a geo-replicator's or an MQTT QoS 2 session's producer


def message(
    payload: bytes,
    seq: int = 0,
    publish_time: int = 1_700_000_000_000,
    producer: str = "prod",
    key: str | None = None,
) -> bytes:
    """The producer's ``[0x0e01][crc][size][MessageMetadata][payload]`` for one message."""
    meta = wire.MessageMetadata(producer_name=producer, sequence_id=seq, publish_time=publish_time)
    if key is not None:
        meta.partition_key = key
    return encode_headers_and_payload(meta, payload)


def chunk(
    payload: bytes,
    uuid: str,
    chunk_id: int,
    num_chunks: int,
    key: str | None = None,
    seq: int = 0,
    producer: str = "prod",
    publish_time: int = 1_700_000_000_000,
) -> bytes:
    """The producer's bytes for one chunk of a chunked message (PIP 37)."""
    meta = wire.MessageMetadata(
        producer_name=producer,
        sequence_id=seq,
        publish_time=publish_time,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=num_chunks,
        total_chunk_msg_size=len(payload) * num_chunks,
    )
    if key is not None:
        meta.partition_key = key
    return encode_headers_and_payload(meta, payload)


def batch(
    payloads: list[bytes], seq: int = 0, publish_time: int = 1_700_000_000_000, producer: str = "prod"
) -> bytes:
    """The producer's bytes for one batch entry of ``len(payloads)`` messages."""
    meta = wire.MessageMetadata(
        producer_name=producer,
        sequence_id=seq,
        publish_time=publish_time,
        num_messages_in_batch=len(payloads),
        highest_sequence_id=seq + len(payloads) - 1,
    )
    body = encode_batch([(wire.SingleMessageMetadata(), p) for p in payloads])
    return encode_headers_and_payload(meta, body)


class Harness:
    def __init__(self, data_dir: Path, **config) -> None:
        config.setdefault("fsync_policy", "never")
        self.config = BrokerConfig(data_dir=data_dir, **config)
        startup.prepare(self.config)
        self.loop = asyncio.new_event_loop()
        self.storage = Storage(self.config.storage_config(), notify=self.loop.call_soon_threadsafe)
        self.topics: dict[str, PersistentTopic] = {}
        self.seq = 0
        self.closed = False

    def topic(self, name: str = TOPIC) -> PersistentTopic:
        if name not in self.topics:
            self.topics[name] = PersistentTopic(
                TopicName.parse(name), self.storage.open_managed_ledger(name), self.config
            )
        return self.topics[name]

    def publish_nowait(
        self, data: bytes, name: str = TOPIC, num_messages: int | None = None, sequence_id: int | None = None
    ) -> asyncio.Future:
        """Store one entry; the future resolves once its durable callback ran on the loop (with the
        position the send is answered with). Sends count their sequence ids unless given one."""
        future = self.loop.create_future()
        send = wire.CommandSend(producer_id=1, sequence_id=self.seq if sequence_id is None else sequence_id)
        if num_messages is not None:
            send.num_messages = num_messages
        self.seq += 1

        def done(position: Position | None, exc: Exception | None) -> None:
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(position)

        self.topic(name).publish(FakeProducer(), send, memoryview(data), done)
        return future

    def publish(self, data: bytes, name: str = TOPIC, num_messages: int | None = None) -> Position:
        return self.run(self.publish_nowait(data, name, num_messages))

    def publish_all(self, datas: list[bytes], name: str = TOPIC) -> list[Position]:
        futures = [self.publish_nowait(d, name) for d in datas]
        return self.run(asyncio.gather(*futures))

    def run(self, awaitable):
        return self.loop.run_until_complete(awaitable)

    def stored(self, name: str = TOPIC) -> list[tuple[Position, wire.BrokerEntryMetadata | None, bytes]]:
        """Every readable entry: (position, broker entry metadata or None, producer bytes)."""
        ml = self.topic(name).ml
        out = []
        first = ml.first_position()
        if first is None:
            return out
        for entry in ml.read_entries(first, 1_000_000):
            meta, rest = split_entry_metadata(entry.data)
            out.append((entry.position, meta, bytes(rest)))
        return out

    def crash(self) -> None:
        """kill -9: nothing is flushed or closed; callbacks still queued on the loop never run."""
        self.closed = True
        self.loop.close()

    def close(self) -> None:
        """A clean shutdown (SIGTERM)."""
        if self.closed:
            return
        self.closed = True
        for topic in self.topics.values():
            topic.close()
        self.storage.close()
        self.run(asyncio.sleep(0))
        self.loop.close()


def segment_records(log_path: Path) -> list[bytes]:
    """The data of every record in a segment .log file, parsed here from the raw bytes.

    An open ledger's file goes on with preallocated zeros after its last record: a
    record whose checksum does not match ends the file's data.
    """
    raw = log_path.read_bytes()
    out, pos = [], 0
    while pos + HEADER.size <= len(raw):
        length, crc = HEADER.unpack_from(raw, pos)
        data = raw[pos + HEADER.size : pos + HEADER.size + length]
        if len(data) != length or checksum(length, data) != crc:
            break
        out.append(data)
        pos += HEADER.size + length
    return out


def entry_metadata_prefix(meta: wire.BrokerEntryMetadata) -> bytes:
    raw = meta.SerializeToString()
    return b"\x0e\x02" + struct.pack(">I", len(raw)) + raw
