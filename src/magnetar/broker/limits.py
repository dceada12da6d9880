"""Limits a public broker needs, as Pulsar's: connections in all and per client IP, producers and
consumers per topic, per subscription and per connection, topics per namespace.

Every limit is off (0) by default. A request past a limit is refused with the error Pulsar gives
(``ProducerBusy``, ``ConsumerBusy``, ``NotAllowedError``), counted by limit for /metrics, and
logged at most once a minute per limit (with the number of refusals in between): a client
retrying in a loop must not flood the log. Everything already admitted goes on working.

Pure logic, no network: the broker asks ``Limits`` before it creates anything, with the counts
it has at hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from magnetar.broker.errors import BrokerError, ConsumerBusy, NotAllowed, ProducerBusy
from magnetar.broker.throttled_counts import ThrottledCounts

log = logging.getLogger(__name__)

#: The ``limit`` label of ``magnetar_limit_refusals_total``, each named after its setting.
CONNECTIONS = "broker_max_connections"
CONNECTIONS_PER_IP = "broker_max_connections_per_ip"
PRODUCERS_PER_TOPIC = "max_producers_per_topic"
PRODUCERS_PER_CONNECTION = "max_producers_per_connection"
CONSUMERS_PER_TOPIC = "max_consumers_per_topic"
CONSUMERS_PER_SUBSCRIPTION = "max_consumers_per_subscription"
CONSUMERS_PER_CONNECTION = "max_consumers_per_connection"
TOPICS_PER_NAMESPACE = "max_topics_per_namespace"
#: MQTT CONNECTs per second from one address (broker/mqtt/floods.py).
MQTT_CONNECT_RATE = "mqtt_max_connect_rate_per_ip"
ALL = (
    CONNECTIONS,
    CONNECTIONS_PER_IP,
    PRODUCERS_PER_TOPIC,
    PRODUCERS_PER_CONNECTION,
    CONSUMERS_PER_TOPIC,
    CONSUMERS_PER_SUBSCRIPTION,
    CONSUMERS_PER_CONNECTION,
    TOPICS_PER_NAMESPACE,
    MQTT_CONNECT_RATE,
)
#: At most one log line per limit per this many seconds.
LOG_INTERVAL_S = 60.0


def reached(count: int, limit: int) -> bool:
    """True when ``count`` things already there leave no room for one more under ``limit`` (0: none)."""
    return limit > 0 and count >= limit


def effective(broker: int, namespace: int | None) -> int:
    """The limit in force: the namespace's policy where it sets one (0 there: no limit, whatever
    the broker's setting), else the broker's setting, as Pulsar's policy hierarchy."""
    return broker if namespace is None else namespace


class LimitReached(BrokerError):
    """A request refused over ``limit``; its class's code is the Pulsar error."""

    def __init__(self, message: str, code: int, limit: str) -> None:
        super().__init__(message, code)
        self.limit = limit


class Refusals:
    """Refusals by limit, with one log line per limit at most every ``LOG_INTERVAL_S`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._counts = ThrottledCounts(ALL, LOG_INTERVAL_S, clock)

    @property
    def counts(self) -> dict[str, int]:
        return self._counts.counts

    def refused(self, limit: str, detail: str) -> None:
        since_log = self._counts.count(limit)
        if since_log is not None:
            log.warning(
                "%s reached: refused %s; %d refusal(s) over this limit since the last line like this "
                "(see docs/configuration.md, Limits)",
                limit,
                detail,
                since_log,
            )


class ConnectionCounter:
    """Open connections in all and per client IP, for ``brokerMaxConnections`` and
    ``brokerMaxConnectionsPerIp``. Nothing is counted while both are off."""

    def __init__(self, max_connections: int, max_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.total = 0
        self.per_ip: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        return self.max_connections > 0 or self.max_per_ip > 0

    def admit(self, ip: str) -> str | None:
        """Count a new connection from ``ip``; the limit it would go past (it is then not
        counted), or None."""
        if reached(self.total, self.max_connections):
            return CONNECTIONS
        from_ip = self.per_ip.get(ip, 0)
        if reached(from_ip, self.max_per_ip):
            return CONNECTIONS_PER_IP
        self.total += 1
        self.per_ip[ip] = from_ip + 1
        return None

    def release(self, ip: str) -> None:
        """A connection ``admit`` counted is gone."""
        self.total -= 1
        left = self.per_ip.get(ip, 0) - 1
        if left > 0:
            self.per_ip[ip] = left
        else:
            self.per_ip.pop(ip, None)  # an IP with no connection left takes no memory


class Limits:
    """The broker's limits (its settings), checked before anything is created for a request."""

    def __init__(self, config, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.refusals = Refusals(clock)
        self.connections = ConnectionCounter(
            config.broker_max_connections, config.broker_max_connections_per_ip
        )

    def _refuse(self, limit: str, error: type[BrokerError], message: str, detail: str) -> LimitReached:
        self.refusals.refused(limit, detail)
        return LimitReached(message, error.code, limit)

    def admit_connection(self, ip: str) -> LimitReached | None:
        """Count a new connection from ``ip``; the error to refuse it with, or None."""
        if not self.connections.enabled:
            return None
        limit = self.connections.admit(ip)
        if limit is None:
            return None
        if limit == CONNECTIONS:
            message = f"Reached the maximum number of connections ({self.connections.max_connections})"
        else:
            message = (
                f"Reached the maximum number of connections on address {ip} ({self.connections.max_per_ip})"
            )
        return self._refuse(limit, NotAllowed, message, f"a connection from {ip}")

    def check_producer(
        self, topic: str, on_topic: int, on_connection: int, namespace_max: int | None, remote: str
    ) -> None:
        """Raise ``LimitReached`` (ProducerBusy) when one more producer is past a limit."""
        config = self.config
        per_connection = config.max_producers_per_connection
        if reached(on_connection, per_connection):
            message = f"Connection reached max producers limit ({per_connection})"
            raise self._refuse(PRODUCERS_PER_CONNECTION, ProducerBusy, message, f"a producer from {remote}")
        per_topic = effective(config.max_producers_per_topic, namespace_max)
        if reached(on_topic, per_topic):
            message = f"Topic reached max producers limit ({per_topic}): {topic}"
            raise self._refuse(PRODUCERS_PER_TOPIC, ProducerBusy, message, f"a producer on {topic}")

    def check_consumer(
        self,
        topic: str,
        subscription: str,
        counts: tuple[Callable[[], int], int, int],
        namespace_max: tuple[int | None, int | None],
        remote: str,
    ) -> None:
        """Raise ``LimitReached`` (ConsumerBusy) when one more consumer is past a limit.
        ``counts``: consumers on the topic (counted only where limited: a sum over its
        subscriptions), the subscription, the connection; ``namespace_max``: the namespace's max
        consumers per topic and per subscription (None: the broker's)."""
        config = self.config
        on_topic, on_subscription, on_connection = counts
        per_connection = config.max_consumers_per_connection
        if reached(on_connection, per_connection):
            message = f"Connection reached max consumers limit ({per_connection})"
            raise self._refuse(CONSUMERS_PER_CONNECTION, ConsumerBusy, message, f"a consumer from {remote}")
        per_topic = effective(config.max_consumers_per_topic, namespace_max[0])
        if per_topic > 0 and reached(on_topic(), per_topic):
            message = f"Topic reached max consumers limit ({per_topic}): {topic}"
            raise self._refuse(CONSUMERS_PER_TOPIC, ConsumerBusy, message, f"a consumer on {topic}")
        per_subscription = effective(config.max_consumers_per_subscription, namespace_max[1])
        if reached(on_subscription, per_subscription):
            message = (
                f"Subscription reached max consumers limit ({per_subscription}): {subscription} on {topic}"
            )
            what = f"a consumer of {subscription} on {topic}"
            raise self._refuse(CONSUMERS_PER_SUBSCRIPTION, ConsumerBusy, message, what)

    def check_topics(self, namespace: str, existing: int, new: int, namespace_max: int | None) -> None:
        """Raise ``LimitReached`` (NotAllowedError; 412 on the admin API) when ``new`` more topics
        (partitions each count) would put ``namespace`` past its limit."""
        limit = effective(self.config.max_topics_per_namespace, namespace_max)
        if limit > 0 and existing + new > limit:
            message = f"Exceed maximum number of topics in namespace ({limit}): {namespace}"
            raise self._refuse(TOPICS_PER_NAMESPACE, NotAllowed, message, f"a new topic in {namespace}")

    def topics_limited(self, namespace_max: int | None) -> bool:
        """Whether topics are counted at all for a namespace with this policy."""
        return effective(self.config.max_topics_per_namespace, namespace_max) > 0
