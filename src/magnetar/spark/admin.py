"""The connector's admin connection: ``AdminClient`` with the options' credentials, and errors
that say which option to look at."""

from __future__ import annotations

from typing import Any

from magnetar.client.admin import AdminClient, AdminError
from magnetar.spark.errors import MagnetarSparkError
from magnetar.spark.security import ConnectionSecurity


class AdminUnreachableError(MagnetarSparkError, ConnectionError):
    """No answer from the admin HTTP port."""


class SparkAdmin(AdminClient):
    """``AdminClient`` whose errors name the connector's options."""

    @classmethod
    def connect(cls, admin_url: str, security: ConnectionSecurity) -> SparkAdmin:
        """An admin connection with the options' token (Bearer) and TLS trust."""
        return cls(admin_url, **security.admin_kwargs())

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return super()._call(method, path, body)
        except OSError as exc:  # urllib's URLError and socket errors: an HTTP refusal is an AdminError
            raise AdminUnreachableError(
                f"cannot reach the broker's admin HTTP port at {self.http_url} (option admin_url): {exc}"
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
