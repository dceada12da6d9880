"""The client's errors: one class per broker error code, each knowing whether a retry can help."""

from __future__ import annotations

from magnetar.protocol import pulsar_wire_pb2 as wire


class ClientError(Exception):
    """Base of every error the client raises."""

    retriable = False


class Timeout(ClientError):
    """An operation did not complete in time (receive, send, a request to the broker)."""


class ConnectError(ClientError):
    """No connection to the broker could be opened or kept."""

    retriable = True


class HttpPortError(ConnectError):
    """The service URL's port answered in HTTP: it is the admin port, not the binary protocol's.
    Not retried: another try gets the same answer."""

    retriable = False


class ConnectionClosed(ConnectError):
    """The connection closed while a request was waiting for its answer."""


class AlreadyClosed(ClientError):
    """The client, producer or consumer is closed."""


class InvalidConfiguration(ClientError, ValueError):
    """Options that cannot work together, e.g. batching with chunking."""


class MessageTooBig(ClientError):
    """A message is larger than the broker accepts and chunking is off."""


class ProducerQueueIsFull(ClientError):
    """``max_pending_messages`` are waiting for receipts and ``block_if_queue_full`` is off."""


class CumulativeAcknowledgementNotAllowed(ClientError):
    """Shared and Key_Shared subscriptions only take individual acknowledgements."""


class TopicLookupError(ClientError):
    """The broker could not say where a topic lives."""


class ServerError(ClientError):
    """The broker answered a request with an error code."""

    code: wire.ServerError.ValueType = wire.UnknownError

    def __init__(self, message: str = "", code: wire.ServerError.ValueType | None = None) -> None:
        if code is not None:
            self.code = code
        super().__init__(
            f"{wire.ServerError.Name(self.code)}: {message}" if message else wire.ServerError.Name(self.code)
        )
        self.server_message = message


def _server_error(name: str, retriable: bool) -> type[ServerError]:
    return type(name, (ServerError,), {"code": wire.ServerError.Value(name), "retriable": retriable})


#: Codes worth another try after a backoff (as the official clients: busy producers or
#: consumers and missing topics fail at once).
_RETRIABLE = {"ServiceNotReady", "TooManyRequests", "PersistenceError"}

#: ServerError subclasses by code, e.g. ``SERVER_ERRORS[wire.TopicNotFound]``.
SERVER_ERRORS: dict[wire.ServerError.ValueType, type[ServerError]] = {
    number: _server_error(name, name in _RETRIABLE) for name, number in wire.ServerError.items()
}
# Each broker error code under its own name, the name the official ``pulsar`` module gives it where
# that differs (second block), so ``except AuthenticationError`` reads as it does with ``pulsar``.
UnknownError = SERVER_ERRORS[wire.UnknownError]
MetadataError = SERVER_ERRORS[wire.MetadataError]
PersistenceError = SERVER_ERRORS[wire.PersistenceError]
AuthenticationError = SERVER_ERRORS[wire.AuthenticationError]
AuthorizationError = SERVER_ERRORS[wire.AuthorizationError]
ConsumerBusy = SERVER_ERRORS[wire.ConsumerBusy]
ServiceNotReady = SERVER_ERRORS[wire.ServiceNotReady]
#: A topic past its backlog quota: "hold" (try again later) and "exception" (give up) policies.
ProducerBlockedQuotaExceededError = SERVER_ERRORS[wire.ProducerBlockedQuotaExceededError]
ProducerBlockedQuotaExceededException = SERVER_ERRORS[wire.ProducerBlockedQuotaExceededException]
ChecksumError = SERVER_ERRORS[wire.ChecksumError]
UnsupportedVersionError = SERVER_ERRORS[wire.UnsupportedVersionError]
TopicNotFound = SERVER_ERRORS[wire.TopicNotFound]
SubscriptionNotFound = SERVER_ERRORS[wire.SubscriptionNotFound]
ConsumerNotFound = SERVER_ERRORS[wire.ConsumerNotFound]
TooManyRequests = SERVER_ERRORS[wire.TooManyRequests]
TopicTerminatedError = SERVER_ERRORS[wire.TopicTerminatedError]
ProducerBusy = SERVER_ERRORS[wire.ProducerBusy]
InvalidTopicName = SERVER_ERRORS[wire.InvalidTopicName]
IncompatibleSchema = SERVER_ERRORS[wire.IncompatibleSchema]
ConsumerAssignError = SERVER_ERRORS[wire.ConsumerAssignError]
TransactionCoordinatorNotFound = SERVER_ERRORS[wire.TransactionCoordinatorNotFound]
InvalidTxnStatus = SERVER_ERRORS[wire.InvalidTxnStatus]
NotAllowedError = SERVER_ERRORS[wire.NotAllowedError]
TransactionConflict = SERVER_ERRORS[wire.TransactionConflict]
TransactionNotFound = SERVER_ERRORS[wire.TransactionNotFound]
ProducerFenced = SERVER_ERRORS[wire.ProducerFenced]

BrokerMetadataError = MetadataError
BrokerPersistenceError = PersistenceError
ServiceUnitNotReady = ServiceNotReady
TooManyLookupRequestException = TooManyRequests
TopicTerminated = TopicTerminatedError
TransactionCoordinatorNotFoundError = TransactionCoordinatorNotFound
InvalidTxnStatusError = InvalidTxnStatus
# The client's own errors under the official names.
PulsarException = ClientError
CumulativeAcknowledgementNotAllowedError = CumulativeAcknowledgementNotAllowed
#: ``pulsar.LookupError`` (it shadows the builtin only inside this module, which does not use it).
LookupError = TopicLookupError


def server_error(code: wire.ServerError.ValueType, message: str = "") -> ServerError:
    """The exception for a broker error code."""
    return SERVER_ERRORS.get(code, ServerError)(message, code)


class UnsupportedOption(InvalidConfiguration):
    """An option of the official client that Magnetar's client does not implement, refused by name
    rather than ignored (code moved from the official client must not run differently unnoticed)."""
