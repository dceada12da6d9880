"""Helpers shared by the interop tests: receiving up to a count, a marker or the reader's end, never up
to a silence; and a raw protocol connection."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid

import pulsar
from prometheus_client.parser import text_string_to_metric_families
from pulsar.exceptions import Timeout

from magnetar.protocol import FrameDecoder, encode_frame, wire
from magnetar.protocol.commands import pong, wrap
from magnetar.protocol.frames import Frame
from magnetar.protocol.headers import encode_headers_and_payload, parse_metadata


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


MARKER_PREFIX = b"marker-of-"  # what receive_spread's markers begin with: no test payload does


def assert_next_is_marker(consumer, producer, marker: bytes = b"marker", **send_options) -> None:
    """Send ``marker`` and have it as ``consumer``'s next message (acknowledged): whatever was still
    to come before it (a message twice, one that should be gone) comes first and fails this.

    The positive event a "nothing more" check waits for, where delivery is in order. Where a message
    could still come by a timer of its own (a nack's or an ack timeout's redelivery), wait first until
    the broker's stats have every message acknowledged: then nothing is left to redeliver.
    """
    producer.send(marker, **send_options)
    expect_markers(consumer, [marker])


def assert_next_are_markers(consumer, producers: dict[bytes, object], **send_options) -> None:
    """A marker from each producer (its key), and those as ``consumer``'s next messages, in any order:
    for a consumer of several topics, whose order holds only within a topic."""
    for marker, producer in producers.items():
        producer.send(marker, **send_options)
    expect_markers(consumer, list(producers))


def expect_markers(consumer, markers: list[bytes]) -> None:
    """Receive (and acknowledge) until each of ``markers``, already sent, arrived: anything else
    first fails."""
    waiting = set(markers)
    while waiting:
        try:
            msg = consumer.receive(10_000)
        except Timeout:
            raise AssertionError(f"the markers {sorted(waiting)} did not arrive") from None
        assert msg.data() in waiting, (
            f"unexpected message {msg.data()!r} id={msg.message_id()} "
            f"redelivery_count={msg.redelivery_count()} before the markers {sorted(waiting)}"
        )
        consumer.acknowledge(msg)
        waiting.discard(msg.data())


def assert_next_read_is_marker(reader, producer, marker: bytes = b"marker") -> None:
    """``assert_next_is_marker`` for a reader: send ``marker`` and read it next."""
    producer.send(marker)
    try:
        msg = reader.read_next(10_000)
    except Timeout:
        raise AssertionError(f"the marker {marker!r} did not arrive") from None
    assert msg.data() == marker, f"unexpected message {msg.data()!r} id={msg.message_id()} before the marker"


def read_until_marker(reader, producer, marker: bytes = b"marker") -> list[pulsar.Message]:
    """Send ``marker`` and read until it: what came before it (where ``read_stored`` cannot ask the
    reader, see tests/client/test_key_routing.py)."""
    producer.send(marker)
    messages = []
    while True:
        try:
            msg = reader.read_next(10_000)
        except Timeout:
            raise AssertionError(
                f"the marker {marker!r} did not arrive after {len(messages)} messages"
            ) from None
        if msg.data() == marker:
            return messages
        messages.append(msg)


def read_stored(reader, timeout_ms: int = 10_000) -> list[pulsar.Message]:
    """What is stored for ``reader`` to read: read until the reader says nothing more is available
    (it asks the broker for the topic's last message id)."""
    messages = []
    while reader.has_message_available():
        try:
            messages.append(reader.read_next(timeout_ms))
        except Timeout:
            raise AssertionError(
                f"a message was available and did not come; read so far: {[m.data() for m in messages]}"
            ) from None
    return messages


def receive_spread(
    consumers, producer, expected: int, ack: bool | list[bool] = True, patience_s: float = 10.0
) -> list[list[bytes]]:
    """``expected`` messages received across ``consumers`` at once (a thread each), then a marker
    for each consumer: the payloads each got until all had their marker, in its order.

    A consumer's marker comes after whatever the broker had sent it before, so an extra (a message
    twice, one that should be gone) is in the answer for the test to see. Markers go out one at a
    time until each consumer had one (the Shared dispatcher hands them round); they are
    acknowledged and left out, as are markers of earlier calls still on the topic. ``ack``: whether
    each consumer acknowledges what it gets. Fails when nothing arrives for ``patience_s``.
    """
    acks = [ack] * len(consumers) if isinstance(ack, bool) else ack
    token = MARKER_PREFIX + uuid.uuid4().hex.encode()
    received: list[list[bytes]] = [[] for _ in consumers]
    marked = [False] * len(consumers)
    arrived: set[bytes] = set()  # this call's markers
    progress = threading.Condition()
    stop = threading.Event()

    def run(index: int, consumer) -> None:
        while not stop.is_set():
            try:
                msg = consumer.receive(100)
            except Timeout:
                continue
            data = msg.data()
            is_marker = data.startswith(MARKER_PREFIX)
            if is_marker or acks[index]:
                consumer.acknowledge(msg)
            with progress:
                if not is_marker:
                    received[index].append(data)
                elif data.startswith(token):
                    arrived.add(data)
                    marked[index] = True
                progress.notify_all()

    def wait(done, what: str) -> None:
        """Until ``done()``, failing once nothing arrived for ``patience_s``."""
        with progress:
            seen = -1
            while not done():
                now = sum(map(len, received)) + len(arrived)
                counts = list(map(len, received))
                assert now != seen, f"{what}: nothing arrived for {patience_s} s; received {counts}"
                seen = now
                progress.wait_for(done, timeout=patience_s)

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in enumerate(consumers)]
    for thread in threads:
        thread.start()
    try:
        wait(lambda: sum(map(len, received)) >= expected, f"{expected} messages")
        for i in range(10 * len(consumers)):
            if all(marked):
                break
            marker = token + b"-%d" % i
            producer.send(marker)
            wait(lambda m=marker: m in arrived, f"the marker {marker!r}")
        assert all(marked), f"consumers {[i for i, m in enumerate(marked) if not m]} got no marker"
    finally:
        stop.set()
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
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """``tls``: speak over TLS with this context (the broker's TLS port)."""
        #: Answer PINGs from a thread, so that reading goes on while our writes are stalled.
        self.pong_in_thread = pong_in_thread
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer is not None:  # before connecting: the window is agreed then
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        if tls is not None:
            self.sock = tls.wrap_socket(self.sock, server_hostname="127.0.0.1")
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

    def create_producer(
        self, topic: str, producer_id: int = 1, request_id: int = 1, name: str | None = None
    ) -> str:
        command = wire.CommandProducer(topic=topic, producer_id=producer_id, request_id=request_id)
        if name is not None:
            command.producer_name = name
        self.send_command(command)
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


def stored_chunks(broker, topic: str) -> list[tuple[str, int]]:
    """(uuid, chunk id) of every chunk stored on ``topic``, in order, read by a raw consumer of its own
    (a non-durable subscription from the earliest entry) up to the topic's last entry, which it asks
    for first: what a consumer will be sent."""
    raw = RawConnection(broker.port)
    try:
        raw.handshake()
        earliest = wire.MessageIdData(ledger_id=2**64 - 1, entry_id=2**64 - 1)
        raw.subscribe(
            topic, "audit", wire.CommandSubscribe.Exclusive, durable=False, start_message_id=earliest
        )
        raw.send_command(wire.CommandGetLastMessageId(consumer_id=1, request_id=2))
        last = raw.expect(wire.BaseCommand.GET_LAST_MESSAGE_ID_RESPONSE).body().last_message_id
        if last.entry_id >= 2**63:  # -1: nothing stored
            return []
        raw.send_command(wire.CommandFlow(consumer_id=1, message_permits=1_000_000))
        out = []
        while True:
            frame = raw.expect(wire.BaseCommand.MESSAGE, timeout=10.0)
            meta, _ = parse_metadata(frame.payload)
            if meta.HasField("chunk_id"):
                out.append((meta.uuid, meta.chunk_id))
            at = frame.body().message_id
            if (at.ledger_id, at.entry_id) == (last.ledger_id, last.entry_id):
                return out
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
