"""What one client address may take of the MQTT port: connections (``broker_max_connections``
and ``broker_max_connections_per_ip``, counted with the Pulsar port's) and CONNECTs per second
(``mqtt_max_connect_rate_per_ip``), so that a device reconnecting in a loop, or a flood from
one address, costs the broker little and nobody else anything.

A refused CONNECT is answered as the standard says, before anything is done for it (no
credentials checked, no session touched): 5.0 gets CONNACK 0x9F (Connection rate exceeded) or
0x97 (Quota exceeded, for the connection limits), 3.1.1 return code 3 (Server unavailable,
its only answer for "not now"); then the connection closes. A connection past a connection
limit that sends no CONNECT is closed after ``REFUSED_WAIT_S``. Refusals are counted with the
broker's limits (``magnetar_limit_refusals_total``) and logged at most once a minute each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.limits import MQTT_CONNECT_RATE, LimitReached
from magnetar.protocol.mqtt import ConnectReturnCode, ReasonCode

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection

#: How long a connection refused for a connection limit may take to send its CONNECT.
REFUSED_WAIT_S = 2.0
#: Addresses whose rate is tracked at most (the fullest buckets are forgotten first).
MAX_ADDRESSES = 100_000


class ConnectRate:
    """A token bucket per client address: ``rate`` CONNECTs a second, up to ``rate`` at once
    (at least one); 0 lets every CONNECT in."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.burst = max(1.0, rate)
        #: address -> (tokens left, when they were counted); refills lazily.
        self._buckets: dict[str, tuple[float, float]] = {}
        self.refused = 0

    def admit(self, address: str, now: float) -> bool:
        if self.rate <= 0:
            return True
        tokens, then = self._buckets.get(address, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        if tokens < 1.0:
            self._buckets[address] = (tokens, now)
            self.refused += 1
            return False
        self._buckets[address] = (tokens - 1.0, now)
        if len(self._buckets) > MAX_ADDRESSES:
            self.forget_full(now)
        return True

    def forget_full(self, now: float) -> None:
        """Drop the buckets that have refilled (they hold nothing an admit would not rebuild)."""
        for address, (tokens, then) in list(self._buckets.items()):
            if tokens + (now - then) * self.rate >= self.burst:
                del self._buckets[address]

    def __len__(self) -> int:
        return len(self._buckets)


def admit_connection(cnx: MqttConnection, address: str) -> LimitReached | None:
    """Count a new connection from ``address`` against the broker's connection limits; the
    refusal to answer its CONNECT with, or None (counted; ``release`` when it closes)."""
    limits = cnx.service.limits
    if not limits.connections.enabled:
        return None
    refused = limits.admit_connection(address)
    if refused is None:
        cnx.counted_address = address
    return refused


def release(cnx: MqttConnection) -> None:
    if cnx.counted_address is not None:
        cnx.service.limits.connections.release(cnx.counted_address)
        cnx.counted_address = None


def connect_refusal(cnx: MqttConnection, address: str, now: float) -> tuple[int, int, str] | None:
    """(5.0 reason, 3.1.1 return code, why) for a CONNECT that must not be taken now."""
    if cnx.over_limit is not None:
        return ReasonCode.QUOTA_EXCEEDED, ConnectReturnCode.SERVER_UNAVAILABLE, str(cnx.over_limit)
    connects = cnx.server.connect_rate
    if connects.admit(address, now):
        return None
    cnx.service.limits.refusals.refused(MQTT_CONNECT_RATE, f"a CONNECT from {address}")
    rate = connects.rate
    why = f"more than {rate:g} CONNECTs a second from {address} (mqtt_max_connect_rate_per_ip)"
    return ReasonCode.CONNECTION_RATE_EXCEEDED, ConnectReturnCode.SERVER_UNAVAILABLE, why
