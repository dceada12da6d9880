"""The errors' names: each broker error code, and the official ``pulsar`` module's exception names,
importable from ``magnetar.client`` and ``magnetar.client.errors`` (code written for ``pulsar``
catches ``AuthenticationError``, ``Timeout``, ``TopicNotFound`` ... under the same names)."""

from __future__ import annotations

import pulsar

import magnetar.client
from magnetar.client import errors
from magnetar.protocol import pulsar_wire_pb2 as wire

#: ``pulsar``'s exceptions for conditions our client does not raise (its own C++ internals,
#: encryption, transactions' client side ...): no alias would ever be raised.
NOT_RAISED = {
    "ConsumerNotInitialized",
    "CryptoError",
    "ErrorGettingAuthenticationData",
    "Interrupted",
    "InvalidMessage",
    "InvalidUrl",
    "MemoryBufferIsFull",
    "NotConnected",
    "OperationNotSupported",
    "ProducerNotInitialized",
    "ReadError",
}


def test_every_broker_error_code_has_its_class_under_its_name():
    for name, code in wire.ServerError.items():
        cls = getattr(errors, name)
        assert cls is errors.SERVER_ERRORS[code] and cls.__name__ == name
        assert issubclass(cls, errors.ServerError)
        assert isinstance(errors.server_error(code, "why"), cls)


def test_the_official_clients_exception_names_are_ours_too():
    official = {
        name
        for name in dir(pulsar)
        if isinstance(getattr(pulsar, name), type) and issubclass(getattr(pulsar, name), BaseException)
    }
    for name in official - NOT_RAISED:
        assert isinstance(getattr(magnetar.client, name), type), name
        assert getattr(magnetar.client, name) is getattr(errors, name), name
        assert issubclass(getattr(magnetar.client, name), errors.ClientError), name
    assert not NOT_RAISED - official  # a name the official client dropped is noticed here


def test_aliases_are_the_same_classes():
    assert errors.BrokerMetadataError is errors.MetadataError
    assert errors.BrokerPersistenceError is errors.PersistenceError
    assert errors.ServiceUnitNotReady is errors.ServiceNotReady
    assert errors.TopicTerminated is errors.TopicTerminatedError
    assert errors.TooManyLookupRequestException is errors.TooManyRequests
    assert errors.PulsarException is errors.ClientError
    assert errors.LookupError is errors.TopicLookupError
    assert errors.CumulativeAcknowledgementNotAllowedError is errors.CumulativeAcknowledgementNotAllowed


def test_the_names_the_docs_use_import():
    from magnetar.client import (  # noqa: F401 - the import is the test
        AuthenticationError,
        AuthorizationError,
        ConsumerBusy,
        NotAllowedError,
        ProducerBlockedQuotaExceededError,
        ProducerBlockedQuotaExceededException,
        ProducerBusy,
        ProducerFenced,
        Timeout,
        TopicNotFound,
        TopicTerminated,
    )
    from magnetar.client.errors import AuthenticationError as FromErrors

    assert AuthenticationError is FromErrors


def test_a_star_import_keeps_the_builtin_lookup_error():
    names: dict[str, object] = {}
    exec("from magnetar.client import *", names)
    assert "LookupError" not in names
    assert "AuthenticationError" in names and "Timeout" in names
