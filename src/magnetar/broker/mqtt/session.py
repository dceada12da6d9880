"""An MQTT session (4.1 in both standards): what the broker keeps of a client id across its
connections, until the session ends (Clean Start, or its Session Expiry Interval after the
connection closes).

Kept in memory while the broker runs: the subscriptions (Topic Filters and their options), the
QoS 2 messages received and not yet released (also durable: ``qos2_store.py``), and the sequence
ids given to the client's messages per topic. Not yet kept across a restart, nor the messages
missed while disconnected (docs/mqtt.md, next steps).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from magnetar.broker.mqtt.qos2_store import Received

#: A 3.1.1 session that is not clean never expires (5.0's 0xFFFFFFFF).
NEVER = 0xFFFFFFFF


@dataclass(slots=True)
class FilterOptions:
    """One Topic Filter a client subscribed to."""

    qos: int
    no_local: bool = False


@dataclass(slots=True)
class Incoming:
    """A QoS 2 PUBLISH received: its record and whether it is stored yet (PUBREC is sent then)."""

    received: Received
    stored: bool = False


@dataclass(slots=True)
class MqttSession:
    client_id: str
    #: Seconds the session outlives its connection (0: it ends with it; NEVER: it does not expire).
    expiry: int = 0
    #: Topic Filter -> its options, in subscribe order.
    filters: dict[str, FilterOptions] = field(default_factory=dict)
    #: QoS 2 messages received and not released, by packet identifier.
    incoming: dict[int, Incoming] = field(default_factory=dict)
    #: The next sequence id of the client's messages per topic (deduplication's numbering).
    sequences: dict[str, int] = field(default_factory=dict)
    #: Ends the session once its connection has been closed for ``expiry`` seconds.
    expiry_timer: asyncio.TimerHandle | None = None
    #: The connection now serving it (None between connections).
    connection: object | None = None

    @property
    def producer_name(self) -> str:
        """The producer name its messages are stored under (Pulsar's MQTT handler names a
        client's producer after its client id too)."""
        return f"mqtt-{self.client_id}"

    def next_sequence(self, topic: str, highest_taken: int) -> int:
        """A sequence id above any the topic has from this client (``highest_taken``: what its
        deduplication holds, -1 for none)."""
        sequence = max(self.sequences.get(topic, 0), highest_taken + 1)
        self.sequences[topic] = sequence + 1
        return sequence
