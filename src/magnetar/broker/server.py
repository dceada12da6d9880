"""What makes the broker's connections (Pulsar's ``PulsarChannelInitializer``).

The service binds the ports; each connection accepted there is a ``ServerCnx`` made here. This
module sits above the connection and the service both, so the service names its connections
only as ``ServedCnx`` and never imports the connection that calls it.
"""

from __future__ import annotations

from collections.abc import Callable

from magnetar.broker.connection import ServerCnx
from magnetar.broker.service import BrokerService


def channel_initializer(service: BrokerService) -> Callable[[], ServerCnx]:
    """The asyncio server's protocol factory: a new ``ServerCnx`` of ``service`` per connection."""

    def initialize() -> ServerCnx:
        return ServerCnx(service)

    return initialize


async def start(service: BrokerService) -> None:
    """Start ``service``, serving the binary protocol through ``ServerCnx`` connections, and MQTT
    (``broker/mqtt``) when ``mqtt_port`` or ``mqtts_port`` is set."""
    await service.start(channel_initializer(service))
    if service.config.mqtt_port is not None or service.config.mqtts_port is not None:
        from magnetar.broker.mqtt import server as mqtt_server  # imported only where MQTT is served

        if service.shares_bundles:  # topics loaded here, for the workers' wildcard filters
            mqtt_server.announce_topics(service)
        try:
            await mqtt_server.start(service)
        except BaseException:
            await service.stop()
            raise
