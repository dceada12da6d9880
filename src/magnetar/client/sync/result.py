"""The outcome a blocking ``send_async`` callback gets, as the official client's ``pulsar.Result``."""

from __future__ import annotations

import enum

from magnetar.client import errors


class Result(enum.IntEnum):
    """Outcome passed to ``send_async`` callbacks: the official client's ``pulsar.Result`` names and
    numbers (``ServerError`` is ours, for a broker error with no more precise result here)."""

    Ok = 0
    UnknownError = 1
    Timeout = 3
    ConnectError = 5
    AlreadyClosed = 15
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicTerminated = 33
    ServerError = 100


def result_of(exc: BaseException | None) -> Result:
    if exc is None:
        return Result.Ok
    for kind, result in (
        (errors.Timeout, Result.Timeout),
        (errors.AlreadyClosed, Result.AlreadyClosed),
        (errors.ProducerQueueIsFull, Result.ProducerQueueIsFull),
        (errors.MessageTooBig, Result.MessageTooBig),
        (errors.TopicTerminated, Result.TopicTerminated),
        (errors.ProducerBlockedQuotaExceededError, Result.ProducerBlockedQuotaExceededError),
        (errors.ProducerBlockedQuotaExceededException, Result.ProducerBlockedQuotaExceededException),
        (errors.ConnectError, Result.ConnectError),
        (errors.ServerError, Result.ServerError),
    ):
        if isinstance(exc, kind):
            return result
    return Result.UnknownError
