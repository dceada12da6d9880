"""Sans-IO MQTT 3.1.1 and 5.0: bytes in, packets out (``MqttDecoder``); packets in, bytes out
(``encode``). Nothing here opens a socket or runs an event loop, like the Pulsar codec beside it;
docs/mqtt.md says why it is ours rather than a library's. Every packet type of ``packets.py`` is
offered here too.
"""

from magnetar.protocol.mqtt import packets
from magnetar.protocol.mqtt.codec import decode, encode
from magnetar.protocol.mqtt.codes import MQTT_3_1_1, MQTT_5, ConnectReturnCode, PacketType, ReasonCode
from magnetar.protocol.mqtt.decoder import MqttDecoder
from magnetar.protocol.mqtt.errors import MqttError, UnsupportedProtocolVersion
from magnetar.protocol.mqtt.packets import *  # noqa: F403  (packets.__all__, listed once there)
from magnetar.protocol.mqtt.properties import NONE as NO_PROPERTIES
from magnetar.protocol.mqtt.properties import Properties

__all__ = [
    "MQTT_3_1_1",
    "MQTT_5",
    "NO_PROPERTIES",
    "ConnectReturnCode",
    "MqttDecoder",
    "MqttError",
    "PacketType",
    "Properties",
    "ReasonCode",
    "UnsupportedProtocolVersion",
    "decode",
    "encode",
]
__all__ += packets.__all__
