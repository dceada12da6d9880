"""The stream of packets on one connection: bytes in, packets out (the fixed header, 2.1).

``MqttDecoder`` splits the byte stream at each packet's Remaining Length and hands the body to
``codec.decode``. A packet larger than ``max_packet_size`` (the whole packet, fixed header
included, as MQTT 5's Maximum Packet Size counts it) is refused as soon as its length is read,
before its bytes are buffered: the broker then answers Packet too large (5.0) or closes (3.1.1);
a CONNECT too large is answered in its own version when its protocol level has come. The
protocol level is learnt from the CONNECT, and every later packet is read in it.
``pending_size`` says how large the packet now arriving is, so that the broker can set memory
aside for a large one before it is read (``broker/mqtt/packet_room.py``).
"""

from __future__ import annotations

from magnetar.protocol.mqtt.codec import decode
from magnetar.protocol.mqtt.codes import MAX_PACKET_SIZE, PacketType, ReasonCode
from magnetar.protocol.mqtt.errors import MqttError
from magnetar.protocol.mqtt.packets import Connect, Packet, PubAck
from magnetar.protocol.mqtt.primitives import read_varint

#: Keep at most this many consumed bytes in front of the buffer before moving the rest down.
_COMPACT_AT = 64 * 1024
#: A PUBACK's first byte (no flags).
_PUBACK = PacketType.PUBACK << 4


class MqttDecoder:
    def __init__(self, max_packet_size: int = MAX_PACKET_SIZE, version: int | None = None) -> None:
        """``version``: the protocol level for a client's decoder (the server's learns it from the
        CONNECT it reads first)."""
        self.max_packet_size = max_packet_size
        self.version = version
        self._buffer = bytearray()
        self._pos = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet handed out as packets."""
        return len(self._buffer) - self._pos

    @property
    def pending_size(self) -> int:
        """The whole size of the packet at the front, as its fixed header declares it, while
        its bytes are still arriving; 0 when none has begun or its length is not read yet."""
        buffer, pos = self._buffer, self._pos
        end = len(buffer)
        if end - pos < 2:
            return 0
        try:
            remaining, start = read_varint(buffer, pos + 1, min(end, pos + 5), "remaining length")
        except MqttError:
            return 0
        total = start - pos + remaining
        return total if end - pos < total else 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._pos and (self._pos >= _COMPACT_AT or self._pos == len(self._buffer)):
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    def next_packet(self) -> Packet | None:
        """The next whole packet, or None until more bytes come; MqttError if the stream breaks
        the standard (the connection cannot go on)."""
        buffer, pos = self._buffer, self._pos
        end = len(buffer)
        if end - pos < 2:
            return None
        remaining = buffer[pos + 1]
        if remaining < 0x80:  # a length under 128: one byte
            start = pos + 2
        else:
            try:
                remaining, start = read_varint(buffer, pos + 1, min(end, pos + 5), "remaining length")
            except MqttError:
                if end - pos < 5 and buffer[end - 1] & 0x80:
                    return None  # the length's last byte is still on its way
                raise
        total = start - pos + remaining
        if total > self.max_packet_size:
            raise MqttError(
                ReasonCode.PACKET_TOO_LARGE,
                f"packet of {total} bytes, over the maximum packet size of {self.max_packet_size}",
                self.version if self.version is not None else self._connect_level(start),
            )
        if end - start < remaining:
            return None
        first = buffer[pos]
        if first == _PUBACK and remaining == 2 and self.version is not None:
            # A PUBACK of success, the packet a QoS 1 subscriber sends most: read here.
            packet_id = buffer[start] << 8 | buffer[start + 1]
            if packet_id:  # identifier 0 is malformed: ``decode`` says so
                self._pos = start + 2
                return PubAck(packet_id)
        body = bytes(buffer[start : start + remaining])
        self._pos = start + remaining
        packet = decode(first, body, self.version)
        if self.version is None and isinstance(packet, Connect):
            self.version = packet.protocol_level
        return packet

    def _connect_level(self, start: int) -> int | None:
        """The protocol level of a CONNECT at the front (its byte after the name ``MQTT``), if
        it has come; None for another packet."""
        buffer = self._buffer
        if (
            buffer[self._pos] >> 4 != 1
            or len(buffer) < start + 7
            or buffer[start : start + 6] != b"\x00\x04MQTT"
        ):
            return None
        return buffer[start + 6]
