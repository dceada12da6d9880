"""Errors the broker reports to clients, each carrying its Pulsar ServerError code."""

from __future__ import annotations

import logging

from magnetar.protocol import wire
from magnetar.storage.errors import StorageError

log = logging.getLogger(__name__)


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


#: What a request can fail with: the broker's own errors, and storage's (a full disk ...).
REQUEST_ERRORS = (BrokerError, StorageError, OSError)


def as_broker_error(exc: Exception, what: str) -> BrokerError:
    """The error a client gets for a failed request: storage failures (a full disk, an I/O
    error) become PersistenceError, which clients retry until their operation timeout, and are
    logged in one line (no traceback: the cause is the disk, not the code)."""
    if isinstance(exc, BrokerError):
        return exc
    log.warning("%s failed: %s", what, exc)
    return PersistenceError(f"{what} failed: {exc}")
