"""Errors the broker reports to clients, each carrying its Pulsar ServerError code."""

from __future__ import annotations

from magnetar.protocol import wire


class BrokerError(Exception):
    """A request failed; ``code`` is the ServerError the client receives."""

    code: int = wire.UnknownError

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class ConsumerBusy(BrokerError):
    code = wire.ConsumerBusy


class TopicNotFound(BrokerError):
    code = wire.TopicNotFound


class SubscriptionNotFound(BrokerError):
    code = wire.SubscriptionNotFound


class InvalidTopicNameError(BrokerError):
    code = wire.InvalidTopicName


class NotAllowed(BrokerError):
    code = wire.NotAllowedError


class ProducerBusy(BrokerError):
    code = wire.ProducerBusy


class ServiceNotReady(BrokerError):
    code = wire.ServiceNotReady


class PersistenceError(BrokerError):
    """Storage could not do it (a topic's or subscription's files could not be opened...)."""

    code = wire.PersistenceError
