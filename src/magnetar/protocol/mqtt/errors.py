"""The one error the MQTT codec raises: the peer broke the standard, and the connection ends.

``MqttError`` is a ``ProtocolError`` (the stream cannot continue) that carries the MQTT 5 reason
code the standard names for it (Malformed Packet, Protocol Error, Packet too large ...), so the
broker can answer a 5.0 client with that code in CONNACK or DISCONNECT before it closes, and a
3.1.1 client with the closing the standard asks for (3.1.1 has no reason codes).
"""

from __future__ import annotations

from magnetar.protocol.errors import ProtocolError
from magnetar.protocol.mqtt.codes import ReasonCode


class MqttError(ProtocolError):
    def __init__(self, reason: ReasonCode, message: str, version: int | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        #: The protocol level of the CONNECT being read when it failed (None: not known), so a
        #: refused CONNECT is answered in the client's own version.
        self.version = version


class UnsupportedProtocolVersion(MqttError):
    """A CONNECT naming a protocol (name, level) we do not speak: answered with CONNACK return
    code 1 (3.1.1) or reason 0x84 (5.0), then closed."""

    def __init__(self, name: str, level: int) -> None:
        super().__init__(
            ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, f"unsupported protocol {name!r} level {level}", level
        )
        self.level = level


def malformed(message: str) -> MqttError:
    return MqttError(ReasonCode.MALFORMED_PACKET, f"malformed packet: {message}")


def protocol_error(message: str) -> MqttError:
    return MqttError(ReasonCode.PROTOCOL_ERROR, f"protocol error: {message}")
