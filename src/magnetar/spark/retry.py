"""The connector's one retry policy: what is worth another try, and for how long.

A broker restart (5-45 s) must not fail a streaming query, so every admin HTTP call and every
client call that opens something (readers, consumers, producers, last-message-id look-ups) goes
through ``RetryPolicy.call``: exponential backoff with jitter until a deadline (option
``retryTimeoutMs``; 0 tries once). Only what can heal is retried: a refused, reset or timed out
connection, an HTTP 5xx, the client's retriable errors. A 4xx refusal, a bad certificate or the
connector's own verdicts fail at once.

Inside one call the client already reconnects with its own backoff for up to its operation
timeout; this policy adds the attempts after that, up to the deadline.
"""

from __future__ import annotations

import logging
import socket
import ssl
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_before_delay, wait_random_exponential

from magnetar.client.admin import AdminError
from magnetar.client.errors import ClientError, Timeout
from magnetar.spark.errors import MagnetarSparkError

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_RETRY_TIMEOUT_MS = 120_000  # a 45 s broker restart, twice over
FIRST_WAIT_S = 0.2
LONGEST_WAIT_S = 5.0


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` may heal by itself (the broker restarting), so another try can help."""
    if isinstance(exc, MagnetarSparkError):
        return False  # the connector's own verdict, retries already spent where they applied
    if isinstance(exc, AdminError):
        return exc.status >= 500
    if isinstance(exc, ClientError):
        # A connection that failed heals, unless the client says it will not (HttpPortError,
        # TlsError: another try gets the same answer); a timeout may heal.
        return exc.retriable or isinstance(exc, Timeout)
    if isinstance(exc, urllib.error.URLError) and not isinstance(exc, urllib.error.HTTPError):
        reason = exc.reason
        return isinstance(reason, BaseException) and is_transient(reason)
    if isinstance(exc, ssl.SSLError | socket.gaierror):
        return False  # a certificate or a host name does not heal
    return isinstance(exc, ConnectionError | TimeoutError)


@dataclass(frozen=True)
class RetryPolicy:
    """Retry for ``timeout_s`` seconds in all (0: a single attempt). Picklable: it travels to tasks."""

    timeout_s: float = DEFAULT_RETRY_TIMEOUT_MS / 1000
    first_wait_s: float = FIRST_WAIT_S
    longest_wait_s: float = LONGEST_WAIT_S

    @classmethod
    def of_ms(cls, timeout_ms: int) -> RetryPolicy:
        return cls(timeout_s=timeout_ms / 1000)

    def call(
        self, fn: Callable[[], T], what: str, transient: Callable[[BaseException], bool] = is_transient
    ) -> T:
        """``fn()``, tried again after failures ``transient`` says may heal, until the deadline;
        the last error propagates. ``what`` names the call in the log."""
        if self.timeout_s <= 0:
            return fn()
        retrying = Retrying(
            stop=stop_before_delay(self.timeout_s),
            wait=wait_random_exponential(multiplier=self.first_wait_s, max=self.longest_wait_s),
            retry=retry_if_exception(transient),
            before_sleep=_logger(what),
            reraise=True,
        )
        return retrying(fn)


def _logger(what: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s failed (attempt %d, %.1f s so far), trying again in %.1f s: %r",
            what,
            state.attempt_number,
            state.seconds_since_start,
            state.upcoming_sleep,
            error,
        )

    return before_sleep
