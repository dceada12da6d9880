"""Producer access modes on a topic (Pulsar's ProducerAccessMode): Shared, Exclusive,
ExclusiveWithFencing and WaitForExclusive; the exclusive holder, the producers waiting in line,
and the topic epoch that goes up each time a producer takes exclusive access."""

from __future__ import annotations

from magnetar.broker.errors import BrokerError
from magnetar.broker.producer import Producer
from magnetar.protocol import wire

ProducerKey = tuple[int, int]


def producer_key(producer: Producer) -> ProducerKey:
    """How a topic's ``producers`` are keyed: the connection and the producer id on it."""
    return (id(producer.cnx), producer.producer_id)


class ProducerAccess:
    def __init__(self, topic_name: object) -> None:
        self._topic_name = topic_name
        self._exclusive: Producer | None = None
        self._waiting: list[Producer] = []
        self.epoch = 0

    def admit(self, producers: dict[ProducerKey, Producer], producer: Producer) -> bool:
        """Add ``producer`` to ``producers`` under its access mode; False when it must wait for
        exclusive access (WaitForExclusive: ``on_ready`` is called once it has it). BrokerError
        when its name is in use or its mode is refused."""
        for existing in producers.values():
            if existing.name == producer.name:
                raise BrokerError(
                    f"Producer with name '{producer.name}' is already connected to topic",
                    wire.ProducerBusy,
                )
        mode = producer.access_mode
        holder = self._exclusive
        if mode == wire.ExclusiveWithFencing:
            for other in list(producers.values()):
                other.fence()
            self._take_exclusive(producer)
        elif holder is not None or (mode != wire.Shared and producers):
            if mode == wire.WaitForExclusive:
                self._waiting.append(producer)
                return False
            if holder is not None:
                raise BrokerError(
                    f"Topic {self._topic_name} has an exclusive producer ({holder.name})", wire.ProducerFenced
                )
            raise BrokerError(
                f"Topic {self._topic_name} has other producers: exclusive access refused", wire.ProducerBusy
            )
        elif mode != wire.Shared:
            self._take_exclusive(producer)
        producers[producer_key(producer)] = producer
        return True

    def release(self, producers: dict[ProducerKey, Producer], producer: Producer) -> None:
        """Take ``producer`` out of ``producers`` (or out of line); the first in line takes
        exclusive access once nobody else holds the topic."""
        if producer in self._waiting:
            self._waiting.remove(producer)
            return
        producers.pop(producer_key(producer), None)
        if producer is self._exclusive:
            self._exclusive = None
        if self._exclusive is None and not producers and self._waiting:
            waiter = self._waiting.pop(0)
            self._take_exclusive(waiter)
            producers[producer_key(waiter)] = waiter
            waiter.on_ready(waiter)

    def _take_exclusive(self, producer: Producer) -> None:
        self._exclusive = producer
        self.epoch += 1
