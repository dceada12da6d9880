"""The connector's admin connection: the client's ``AdminClient`` with the options' credentials,
every HTTP exchange run by ``ConnectorCalls`` (retried across broker restarts, with errors that
say which option to look at)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from magnetar.client.admin import AdminClient, ForbiddenError, UnauthorizedError, refusal
from magnetar.spark.errors import MagnetarSparkError
from magnetar.spark.retry import RetryPolicy
from magnetar.spark.security import ConnectionSecurity

T = TypeVar("T")


class AdminUnreachableError(MagnetarSparkError, ConnectionError):
    """No answer from the admin HTTP port."""


def connect_admin(admin_url: str, security: ConnectionSecurity, retry: RetryPolicy) -> AdminClient:
    """An admin connection with the options' token (Bearer), TLS trust and retry policy."""
    return AdminClient(admin_url, **security.admin_kwargs(), runner=ConnectorCalls(admin_url, retry))


@dataclass(frozen=True)
class ConnectorCalls:
    """An ``AdminClient`` runner: each exchange retried by the options' ``RetryPolicy`` while the
    broker cannot answer (the deduplication POST is idempotent), and its failures in the
    connector's terms."""

    admin_url: str
    retry: RetryPolicy

    def __call__(self, exchange: Callable[[], T], what: str) -> T:
        try:
            return self.retry.call(exchange, f"admin {what}")
        except OSError as exc:  # urllib's URLError and socket errors: an HTTP refusal is an AdminError
            raise AdminUnreachableError(
                f"cannot reach the broker's admin HTTP port at {self.admin_url} (option admin_url), "
                f"retried for {self.retry.timeout_s:g} s (option retryTimeoutMs): {exc}"
            ) from None
        except UnauthorizedError as exc:
            raise refusal(
                exc.status,
                f"{exc.reason} (the admin API at {self.admin_url} refused the connector's credentials: "
                "set the options pulsar.client.authPluginClassName and pulsar.client.authParams, or token)",
                exc.url,
            ) from None
        except ForbiddenError as exc:
            raise refusal(
                exc.status,
                f"{exc.reason} (the admin API at {self.admin_url} does not allow the connector's role "
                "this call)",
                exc.url,
            ) from None
