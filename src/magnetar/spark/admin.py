"""The connector's admin connection: ``AdminClient`` with the options' credentials, every call
retried across broker restarts (``RetryPolicy``), and errors that say which option to look at."""

from __future__ import annotations

from typing import Any

from magnetar.client.admin import AdminClient, AdminError
from magnetar.spark.errors import MagnetarSparkError
from magnetar.spark.retry import RetryPolicy
from magnetar.spark.security import ConnectionSecurity


class AdminUnreachableError(MagnetarSparkError, ConnectionError):
    """No answer from the admin HTTP port."""


class SparkAdmin(AdminClient):
    """``AdminClient`` whose calls are retried while the broker cannot answer, and whose errors
    name the connector's options."""

    retry = RetryPolicy()

    @classmethod
    def connect(cls, admin_url: str, security: ConnectionSecurity, retry: RetryPolicy) -> SparkAdmin:
        """An admin connection with the options' token (Bearer), TLS trust and retry policy."""
        admin = cls(admin_url, **security.admin_kwargs())
        admin.retry = retry
        return admin

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        call = super()._call  # every call of the admin API passes here (deduplication's POST is idempotent)
        try:
            return self.retry.call(lambda: call(method, path, body), f"admin {method} {path}")
        except OSError as exc:  # urllib's URLError and socket errors: an HTTP refusal is an AdminError
            raise AdminUnreachableError(
                f"cannot reach the broker's admin HTTP port at {self.http_url} (option admin_url), "
                f"retried for {self.retry.timeout_s:g} s (option retryTimeoutMs): {exc}"
            ) from None

    def _refused(self, status: int, reason: str, url: str) -> AdminError:
        where = url.split("/admin/")[0]
        if status == 401:
            reason = (
                f"{reason} (the admin API at {where} refused the connector's credentials: "
                "set the options pulsar.client.authPluginClassName and pulsar.client.authParams, or token)"
            )
        elif status == 403:
            reason = f"{reason} (the admin API at {where} does not allow the connector's role this call)"
        return super()._refused(status, reason, url)
