"""A lean asyncio MQTT client for the MQTT benchmark (``bench/mqtt.py``), on Magnetar's own sans-IO
codec (``magnetar.protocol.mqtt``): thousands of connections in one process, the same client for
every broker measured. It does what the benchmark needs and no more: CONNECT, SUBSCRIBE, PUBLISH at
QoS 0 and 1 (PUBACK awaited per message), receiving at QoS 0 and 1 (PUBACK sent back), DISCONNECT.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from magnetar.protocol.mqtt import (
    MQTT_3_1_1,
    ConnAck,
    Connect,
    Disconnect,
    MqttDecoder,
    Packet,
    PubAck,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    encode,
)

OnMessage = Callable[[Publish], None]


class MqttClient(asyncio.Protocol):
    def __init__(self, version: int, on_message: OnMessage | None) -> None:
        self.version = version
        self.decoder = MqttDecoder(version=version)
        self.on_message = on_message
        self.transport: asyncio.Transport | None = None
        loop = asyncio.get_running_loop()
        self.connack: asyncio.Future[ConnAck] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        #: Packet identifier -> the future its PUBACK or SUBACK completes.
        self.waiting: dict[int, asyncio.Future[Packet]] = {}
        self._next_id = 0
        self._writable = asyncio.Event()
        self._writable.set()

    # -- asyncio.Protocol ---------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.decoder.feed(data)
        while (packet := self.decoder.next_packet()) is not None:
            kind = type(packet)
            if kind is Publish:
                if self.on_message is not None:
                    self.on_message(packet)  # type: ignore[arg-type]
                if packet.qos == 1:  # type: ignore[union-attr]
                    self.send(PubAck(packet.packet_id))  # type: ignore[union-attr, arg-type]
            elif kind is PubAck or kind is SubAck:
                future = self.waiting.pop(packet.packet_id, None)  # type: ignore[union-attr]
                if future is not None and not future.done():
                    future.set_result(packet)
            elif kind is ConnAck and not self.connack.done():
                self.connack.set_result(packet)  # type: ignore[arg-type]

    def connection_lost(self, exc: Exception | None) -> None:
        error = ConnectionError(f"closed by the broker: {exc}")
        for future in (self.connack, *self.waiting.values()):
            if not future.done():
                future.set_exception(error)
        self.waiting.clear()
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- use ---------------------------------------------------------------------------------------------
    def send(self, packet: Packet) -> None:
        assert self.transport is not None
        self.transport.write(encode(packet, self.version))

    async def drain(self) -> None:
        """Wait while the socket's write buffer is full (QoS 0 has no other flow control)."""
        await self._writable.wait()

    def _packet_id(self) -> int:
        while True:
            self._next_id = self._next_id % 65535 + 1
            if self._next_id not in self.waiting:
                return self._next_id

    def publish(self, topic: str, payload: bytes, qos: int = 0) -> asyncio.Future[Packet] | None:
        """QoS 0: written, None. QoS 1: the future of its PUBACK."""
        if qos == 0:
            self.send(Publish(topic, payload))
            return None
        packet_id = self._packet_id()
        future: asyncio.Future[Packet] = asyncio.get_running_loop().create_future()
        self.waiting[packet_id] = future
        self.send(Publish(topic, payload, qos, packet_id=packet_id))
        return future

    async def subscribe(self, topic_filter: str, qos: int) -> SubAck:
        packet_id = self._packet_id()
        future: asyncio.Future[Packet] = asyncio.get_running_loop().create_future()
        self.waiting[packet_id] = future
        self.send(Subscribe(packet_id, (Subscription(topic_filter, qos),)))
        suback = await future
        assert isinstance(suback, SubAck)
        if suback.reason_codes[0] >= 0x80:
            raise ConnectionError(f"SUBSCRIBE {topic_filter!r} refused: {suback.reason_codes[0]:#x}")
        return suback

    async def disconnect(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.send(Disconnect())
            self.transport.close()
        await self.closed


async def connect(
    port: int,
    client_id: str,
    *,
    host: str = "127.0.0.1",
    source: str | None = None,
    version: int = MQTT_3_1_1,
    clean: bool = True,
    on_message: OnMessage | None = None,
) -> MqttClient:
    """A connected client (CONNACK Success), from ``source`` (a loopback address) if given."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if source is not None:
        sock.bind((source, 0))
    try:
        await loop.sock_connect(sock, (host, port))
    except BaseException:
        sock.close()
        raise
    _, client = await loop.create_connection(lambda: MqttClient(version, on_message), sock=sock)
    client.send(Connect(client_id, version, clean, keep_alive=0))
    connack = await client.connack
    if connack.reason_code != 0:
        raise Refused(f"CONNECT {client_id!r} refused: {connack.reason_code:#x}", connack.reason_code)
    return client


class Refused(ConnectionError):
    """A CONNACK other than Success, with its code (3.1.1's return code)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


#: 3.1.1's CONNACK Server unavailable: try again (a device does), as ``connect_again`` does.
SERVER_UNAVAILABLE = 3


async def connect_again(port: int, client_id: str, tries: int = 20, **options) -> tuple[MqttClient, int]:
    """``connect``, again after 50 ms each time the broker answers Server unavailable (Magnetar
    with workers, a burst of CONNECTs handed to their home worker at once: docs/mqtt.md, Workers);
    the client and how many times it was refused."""
    for refused in range(tries):
        try:
            return await connect(port, client_id, **options), refused
        except Refused as exc:
            if exc.code != SERVER_UNAVAILABLE or refused == tries - 1:
                raise
        await asyncio.sleep(0.05)
    raise AssertionError("unreachable")
