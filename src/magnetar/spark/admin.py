"""The admin HTTP calls the connector needs beyond the index look-ups of ``AdminClient``:
partition counts, a namespace's topics, and the namespace deduplication policy."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.admin.client import (
    AdminClient,
    AdminError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
)
from magnetar.spark.errors import MagnetarSparkError
from magnetar.spark.security import ConnectionSecurity
from magnetar.spark.topics import namespace_of, split_partition

_ERRORS = {401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError, 409: ConflictError}


class AdminUnreachableError(MagnetarSparkError, ConnectionError):
    """No answer from the admin HTTP port."""


def _path(*parts: str) -> str:
    return "/".join(urllib.parse.quote(p, safe="") for p in parts)


class SparkAdmin(AdminClient):
    """``AdminClient`` plus the namespace and topic paths of Pulsar's admin v2 API."""

    @classmethod
    def connect(cls, admin_url: str, security: ConnectionSecurity) -> SparkAdmin:
        """An admin connection with the options' token (Bearer) and TLS trust."""
        return cls(admin_url, **security.admin_kwargs())

    def partition_count(self, topic: str) -> int:
        """Partitions of a partitioned topic; 0 for a non-partitioned (or unknown) one."""
        tenant, namespace, local = topic.removeprefix("persistent://").split("/")
        body = self._call("GET", f"/admin/v2/persistent/{_path(tenant, namespace, local)}/partitions")
        return int(body.get("partitions", 0)) if body else 0

    def namespace_topics(self, namespace: str) -> list[str]:
        """Every persistent topic of ``tenant/namespace``, partitions included."""
        tenant, ns = namespace.split("/")
        return list(self._call("GET", f"/admin/v2/persistent/{_path(tenant, ns)}") or [])

    def topic_exists(self, topic: str) -> bool:
        """Whether a non-partitioned topic (or one partition) exists.

        Listing the namespace needs a namespace-level grant (Pulsar's GET_TOPICS); a role granted
        only this topic asks for the topic's stats instead (404: not stored).
        """
        try:
            return topic in self.namespace_topics(namespace_of(topic))
        except ForbiddenError:
            tenant, namespace, local = topic.removeprefix("persistent://").split("/")
            try:
                self._call("GET", f"/admin/v2/persistent/{_path(tenant, namespace, local)}/stats")
            except NotFoundError:
                return False
            return True

    def base_topics(self, namespace: str) -> list[str]:
        """The namespace's topics with partitions folded into their partitioned topic."""
        return sorted({split_partition(t)[0] for t in self.namespace_topics(namespace)})

    def deduplication(self, namespace: str) -> bool | None:
        """The namespace's deduplication policy; None when unset (the broker default applies)."""
        tenant, ns = namespace.split("/")
        body = self._call("GET", f"/admin/v2/namespaces/{_path(tenant, ns)}/deduplication")
        return None if body is None else bool(body)

    def set_deduplication(self, namespace: str, enabled: bool) -> None:
        tenant, ns = namespace.split("/")
        self._call("POST", f"/admin/v2/namespaces/{_path(tenant, ns)}/deduplication", enabled)

    def _get(self, path: str) -> dict:  # AdminClient's look-ups, with the errors below
        return self._call("GET", path)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """JSON in and out; None for an empty answer (204)."""
        url = self.http_url + path
        data = None if body is None else json.dumps(body).encode()
        headers = self._headers()
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as response:
                text = response.read()
        except urllib.error.HTTPError as exc:
            raise _error(exc, url) from None
        except (urllib.error.URLError, OSError) as exc:
            raise AdminUnreachableError(
                f"cannot reach the broker's admin HTTP port at {self.http_url} (option admin_url): {exc}"
            ) from None
        return json.loads(text) if text.strip() else None


def _error(exc: urllib.error.HTTPError, url: str) -> AdminError:
    text = exc.read().decode(errors="replace")
    try:
        reason = json.loads(text)["reason"]
    except (ValueError, KeyError, TypeError):
        reason = text or exc.reason
    where = url.split("/admin/")[0]
    if exc.code == 401:
        reason = (
            f"{reason} (the admin API at {where} refused the connector's credentials: "
            "set the options pulsar.client.authPluginClassName and pulsar.client.authParams, or token)"
        )
    elif exc.code == 403:
        reason = f"{reason} (the admin API at {where} does not allow the connector's role this call)"
    return _ERRORS.get(exc.code, AdminError)(exc.code, str(reason), url)
