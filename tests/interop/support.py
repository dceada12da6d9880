"""Helpers shared by the interop tests: receiving with deadlines, and a raw protocol connection."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.error
import urllib.request

import pulsar
from prometheus_client.parser import text_string_to_metric_families
from pulsar.exceptions import Timeout

from magnetar.protocol import FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import pong, wrap
from magnetar.protocol.frames import Frame
from magnetar.protocol.headers import encode_headers_and_payload, parse_metadata

QUIET_MS = 500  # how long "nothing more arrives" is given to prove itself


def receive_n(consumer, n: int, timeout_ms: int = 5000, ack: bool = False) -> list[pulsar.Message]:
    """Exactly ``n`` messages, each within ``timeout_ms`` of the previous one."""
    messages = []
    for i in range(n):
        try:
            msg = consumer.receive(timeout_ms)
        except Timeout:
            raise AssertionError(
                f"only {i} of {n} messages arrived: {[m.data() for m in messages]}"
            ) from None
        if ack:
            consumer.acknowledge(msg)
        messages.append(msg)
    return messages


def assert_next_is_marker(consumer, producer, marker: bytes = b"marker", **send_options) -> None:
    """Send ``marker`` and have it as ``consumer``'s next message (acknowledged): whatever was still
    to come before it (a message twice, one that should be gone) comes first and fails this.

    The positive event a "nothing more" check waits for, where delivery is in order; a message
    that may come later by a timer of its own (a nack's or an ack timeout's redelivery) needs
    ``assert_nothing_more``.
    """
    producer.send(marker, **send_options)
    try:
        msg = consumer.receive(10_000)
    except Timeout:
        raise AssertionError(f"the marker {marker!r} did not arrive") from None
    assert msg.data() == marker, (
        f"unexpected message {msg.data()!r} id={msg.message_id()} before the marker {marker!r}"
    )
    consumer.acknowledge(msg)


def assert_nothing_more(consumer, quiet_ms: int = QUIET_MS) -> None:
    """Nothing arrives within ``quiet_ms``: only for what may come by a timer of its own (see
    ``assert_next_is_marker`` for what comes in order)."""
    try:
        msg = consumer.receive(quiet_ms)
    except Timeout:
        return
    raise AssertionError(
        f"unexpected message {msg.data()!r} id={msg.message_id()} redelivery_count={msg.redelivery_count()}"
    )


def read_all(reader, quiet_ms: int = 1000) -> list[pulsar.Message]:
    """Everything a reader reads until it has been quiet for ``quiet_ms``."""
    messages = []
    while True:
        try:
            messages.append(reader.read_next(quiet_ms))
        except Timeout:
            return messages


def drain(
    consumers, expected: int, ack: bool = True, patience_ms: int = 5000, quiet_ms: int = QUIET_MS
) -> list[list[bytes]]:
    """Receive from all ``consumers`` at once until ``expected`` messages arrived and all stayed quiet.

    A thread per consumer receives (and acks); they stop once no message arrived anywhere for
    ``patience_ms`` while fewer than ``expected`` arrived, or for ``quiet_ms`` after that (time for
    extras such as duplicates to show). Returns the payloads each consumer got, in its order.
    """
    received: list[list[bytes]] = [[] for _ in consumers]
    lock = threading.Lock()
    last_progress = [time.monotonic()]

    def quiet_long_enough() -> bool:
        with lock:
            total = sum(map(len, received))
            idle_ms = (time.monotonic() - last_progress[0]) * 1000
        return idle_ms > (quiet_ms if total >= expected else patience_ms)

    def run(index: int, consumer) -> None:
        while not quiet_long_enough():
            try:
                msg = consumer.receive(50)
            except Timeout:
                continue
            if ack:
                consumer.acknowledge(msg)
            with lock:
                received[index].append(msg.data())
                last_progress[0] = time.monotonic()

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in enumerate(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return received


def ids(messages) -> list[tuple[int, int, int]]:
    return [msg_id_tuple(m.message_id()) for m in messages]


def msg_id_tuple(msg_id) -> tuple[int, int, int]:
    return (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())


# -- a raw protocol connection ----------------------------------------------------------------------------


class RawConnection:
    """A hand-driven Pulsar connection for sending bad bytes; frames built with magnetar.protocol."""

    def __init__(
        self,
        port: int,
        timeout: float = 5.0,
        receive_buffer: int | None = None,
        pong_in_thread: bool = False,
    ) -> None:
        #: Answer PINGs from a thread, so that reading goes on while our writes are stalled.
        self.pong_in_thread = pong_in_thread
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # before connecting: the window is agreed then
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.decoder = FrameDecoder(64 * 1024 * 1024)

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Write bytes; a broker that closes mid-write (as it must on an over-limit frame header, while the
        rest of the frame is still on its way) is not an error here: the next recv_frame reports the close."""
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            self.sock.sendall(data)

    def send_command(self, body, payload: bytes | None = None) -> None:
        self.send(encode_frame(wrap(body), payload))

    def recv_frame(self, timeout: float = 5.0) -> Frame | None:
        """The next frame other than PING (answered), or None once the broker closed the connection."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.decoder.next_frame()
            if frame is not None:
                if frame.type == wire.BaseCommand.PING:
                    if self.pong_in_thread:
                        threading.Thread(target=self.send, args=(encode_frame(pong()),), daemon=True).start()
                    else:
                        self.send(encode_frame(pong()))
                    continue
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no frame from the broker within {timeout}s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError(f"no frame from the broker within {timeout}s") from None
            except ConnectionResetError:
                data = b""
            if not data:
                return None
            self.decoder.feed(data)

    def expect(self, cmd_type: int, timeout: float = 5.0) -> Frame:
        frame = self.recv_frame(timeout)
        assert frame is not None, f"broker closed the connection instead of sending {cmd_type}"
        assert frame.type == cmd_type, f"expected {wire.BaseCommand.Type.Name(cmd_type)}, got {frame.command}"
        return frame

    def expect_closed(self, timeout: float = 5.0) -> list[Frame]:
        """Frames the broker sent before closing the connection; fails if it stays open."""
        frames = []
        while (frame := self.recv_frame(timeout)) is not None:
            frames.append(frame)
        return frames

    # -- conversation steps --

    def handshake(self) -> wire.CommandConnected:
        self.send_command(wire.CommandConnect(client_version="magnetar-interop-raw", protocol_version=20))
        return self.expect(wire.BaseCommand.CONNECTED).body()

    def create_producer(self, topic: str, producer_id: int = 1, request_id: int = 1) -> str:
        self.send_command(wire.CommandProducer(topic=topic, producer_id=producer_id, request_id=request_id))
        frame = self.expect(wire.BaseCommand.PRODUCER_SUCCESS)
        assert frame.body().request_id == request_id
        return frame.body().producer_name

    def subscribe(
        self, topic: str, subscription: str, sub_type: int, consumer_id: int = 1, permits: int = 0, **fields
    ) -> None:
        """SUBSCRIBE (answered SUCCESS), then FLOW ``permits`` if any."""
        self.send_command(
            wire.CommandSubscribe(
                topic=topic,
                subscription=subscription,
                sub_type=sub_type,
                consumer_id=consumer_id,
                request_id=consumer_id,
                **fields,
            )
        )
        self.expect(wire.BaseCommand.SUCCESS)
        if permits:
            self.send_command(wire.CommandFlow(consumer_id=consumer_id, message_permits=permits))

    def send_message(
        self,
        producer_id: int,
        producer_name: str,
        sequence_id: int,
        payload: bytes,
        corrupt_checksum: bool = False,
    ) -> None:
        self.send(send_frame(producer_id, producer_name, sequence_id, payload, corrupt_checksum))


def send_frame(
    producer_id: int, producer_name: str, sequence_id: int, payload: bytes, corrupt_checksum: bool = False
) -> bytes:
    """A whole SEND frame of one message, as a producer would write it."""
    meta = wire.MessageMetadata(
        producer_name=producer_name, sequence_id=sequence_id, publish_time=int(time.time() * 1000)
    )
    data = bytearray(encode_headers_and_payload(meta, payload))
    if corrupt_checksum:
        data[-1] ^= 0xFF  # the payload changes under the producer's CRC
    return encode_frame(wrap(wire.CommandSend(producer_id=producer_id, sequence_id=sequence_id)), bytes(data))


# -- the admin HTTP API ----------------------------------------------------------------------------


def admin_call(broker, method: str, path: str, body=None) -> tuple[int, object]:
    """(status, decoded JSON body or None) of one admin API call; HTTP errors are answers too."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        broker.http_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text else None
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        return exc.code, json.loads(text) if text else None


# -- chunked messages (PIP 37) ------------------------------------------------------------------------


def stored_chunks(broker, topic: str, quiet: float = 1.0) -> list[tuple[str, int]]:
    """(uuid, chunk id) of every chunk stored on ``topic``, in order, read by a raw consumer of its own
    (a non-durable subscription from the earliest entry): what a consumer will be sent."""
    raw = RawConnection(broker.port)
    try:
        raw.handshake()
        earliest = wire.MessageIdData(ledger_id=2**64 - 1, entry_id=2**64 - 1)
        raw.subscribe(
            topic,
            "audit",
            wire.CommandSubscribe.Exclusive,
            permits=1_000_000,
            durable=False,
            start_message_id=earliest,
        )
        out = []
        while True:
            try:
                frame = raw.recv_frame(quiet)
            except TimeoutError:
                return out
            if frame is not None and frame.type == wire.BaseCommand.MESSAGE:
                meta, _ = parse_metadata(frame.payload)
                if meta.HasField("chunk_id"):
                    out.append((meta.uuid, meta.chunk_id))
    finally:
        raw.close()


def chunk_frame(
    producer_name: str, sequence_id: int, uuid: str, chunk_id: int, parts: list[bytes], key: str | None = None
) -> bytes:
    """A SEND of one chunk of the message made of ``parts``, as a chunking producer writes it."""
    meta = wire.MessageMetadata(
        producer_name=producer_name,
        sequence_id=sequence_id,
        publish_time=int(time.time() * 1000),
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=len(parts),
        total_chunk_msg_size=sum(map(len, parts)),
    )
    if key is not None:
        meta.partition_key = key
    body = wire.CommandSend(producer_id=1, sequence_id=sequence_id, is_chunk=True)
    return encode_frame(wrap(body), encode_headers_and_payload(meta, parts[chunk_id]))


def round_trip(client, topic: str, payloads: list[bytes]) -> list[bytes]:
    """Send ``payloads`` on ``topic`` and receive them on a new subscription, with the official
    client or ours (the same names): what came back, in order."""
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, chunking_enabled=False, batching_enabled=False)
    for data in payloads:
        producer.send(data)
    received = []
    for _ in payloads:
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        received.append(msg.data())
    producer.close()
    consumer.close()
    return received


def scrape(broker) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the broker's ``GET /metrics``: {(name, sorted labels): value}."""
    with urllib.request.urlopen(broker.http_url + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def labelled(broker, name: str, label: str) -> dict[str, float]:
    """The samples of metric ``name`` by the value of their one ``label``: {label value: value}."""
    return {
        dict(labels)[label]: value for (sample, labels), value in scrape(broker).items() if sample == name
    }
