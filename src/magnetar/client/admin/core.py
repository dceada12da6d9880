"""The core of a small blocking client for Magnetar's admin HTTP API: the message index look-ups, topics and
namespaces, the deduplication policy, and granting, listing and revoking permissions (Pulsar's
admin v2 paths).

    from magnetar.client.admin import AdminClient

    admin = AdminClient("http://127.0.0.1:8080")
    msg_id = admin.message_id_for_index("persistent://public/default/t", 41)
    admin.index_for_message_id("persistent://public/default/t", msg_id)  # -> 41

Indexes are per topic partition: name the partition (``t-partition-2``), or pass a message
id whose ``partition()`` says which. Failures raise ``AdminError`` (``NotFoundError`` for an
unknown topic or an index or message id not stored, ``ConflictError`` when the broker's index
interceptor is off, ``UnauthorizedError`` (401) for missing or refused credentials,
``ForbiddenError`` (403) for a role without the right) carrying the HTTP status and the
broker's reason. Standard library only (urllib) besides magnetar's client and protocol, so it
runs anywhere, in Spark executors too.
"""

from __future__ import annotations

import functools
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from magnetar.client.admin.clusters import Clusters
from magnetar.client.admin.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    refusal,
)
from magnetar.client.admin.lookups import Lookups
from magnetar.client.admin.namespaces import Namespaces
from magnetar.client.admin.paths import (
    index_topic_path,
    indexed_topic,
    message_id_parts,
    namespace_parts,
    namespace_path,
    quote,
    topic_path,
)
from magnetar.client.admin.schemas import Schemas
from magnetar.client.admin.tenants import Tenants
from magnetar.client.admin.topics import Topics
from magnetar.client.message import MessageId
from magnetar.client.tls import TlsOptions
from magnetar.protocol.message_id import message_id_fields
from magnetar.protocol.topic_name import TopicName, split_partition

T = TypeVar("T")


class CallRunner(Protocol):
    """Runs each HTTP exchange of an ``AdminClient``: ``runner(exchange, what)`` returns
    ``exchange()``'s answer. ``what`` names the call (``"GET /admin/v2/..."``). A runner may try
    the exchange again (a retry policy across broker restarts), or raise a clearer error in place
    of the one the exchange raised (``AdminError`` for an HTTP refusal, ``OSError`` when nothing
    answers)."""

    def __call__(self, exchange: Callable[[], T], what: str) -> T: ...


class AdminClient:
    """Blocking calls to a broker's admin HTTP port (``http_url``, e.g. ``http://host:8080``), or
    its HTTPS port (``https://host:8443``): the broker's certificate is checked against
    ``tls_trust_certs_file_path`` (the system's CAs without it) and must name the URL's host unless
    ``tls_validate_hostname`` is off; ``tls_allow_insecure_connection`` checks nothing. With
    ``tls_certificate_file_path`` and ``tls_key_file_path`` the client presents its certificate
    (a broker requiring trusted client certificates wants one). ``runner`` (a ``CallRunner``) runs
    every HTTP exchange; without one each is tried once."""

    def __init__(
        self,
        http_url: str,
        timeout: float = 30.0,
        token: str | Callable[[], str] | None = None,
        *,
        tls_trust_certs_file_path: str | None = None,
        tls_validate_hostname: bool = True,
        tls_allow_insecure_connection: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_key_file_path: str | None = None,
        runner: CallRunner | None = None,
    ) -> None:
        """``token``: sent as ``Authorization: Bearer <token>`` when the broker authenticates
        (the token text, or a function returning a fresh one for each call)."""
        self.http_url = http_url.rstrip("/")
        self.timeout = timeout
        self.token = token
        self.runner = runner
        self._ssl: ssl.SSLContext | None = None
        if self.http_url.startswith("https://"):
            self._ssl = TlsOptions(
                tls_trust_certs_file_path,
                tls_validate_hostname,
                tls_allow_insecure_connection,
                tls_certificate_file_path,
                tls_key_file_path,
            ).context()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token is not None:
            token = self.token() if callable(self.token) else self.token
            headers["Authorization"] = f"Bearer {token.strip()}"
        return headers

    # -- resources, as the Java PulsarAdmin's tenants(), namespaces(), ... -------------------------
    @functools.cached_property
    def tenants(self) -> Tenants:
        return Tenants(self)

    @functools.cached_property
    def namespaces(self) -> Namespaces:
        return Namespaces(self)

    @functools.cached_property
    def clusters(self) -> Clusters:
        return Clusters(self)

    @functools.cached_property
    def schemas(self) -> Schemas:
        return Schemas(self)

    # -- the message index (per topic partition) -------------------------------------------------
    def message_id_for_index(self, topic: str, index: int) -> MessageId:
        """The id of the message with ``index`` on ``topic`` (a plain topic or one partition).

        The result is a ``magnetar.client.MessageId`` (partition, ledger, entry, batch index)
        that readers and ``seek`` accept.
        """
        body = self._get(f"{index_topic_path(topic)}/messageid/{int(index)}")
        ledger, entry, batch_index, partition = message_id_fields(body)
        return MessageId(partition, ledger, entry, batch_index, topic=str(indexed_topic(topic)))

    def index_for_message_id(self, topic: str, message_id: Any) -> int:
        """The index of the message ``message_id`` on ``topic``.

        ``message_id``: a ``magnetar.client.MessageId``, an official ``pulsar.MessageId``, a
        ``(ledger_id, entry_id[, batch_index])`` tuple or a dict with ``ledgerId``, ``entryId``
        and optionally ``batchIndex`` and ``partition``. Without a batch index, a batch entry
        answers the index of its last message.
        """
        ledger, entry, batch_index, partition = message_id_parts(message_id)
        query = urllib.parse.urlencode({"ledgerId": ledger, "entryId": entry, "batchIndex": batch_index})
        body = self._get(f"{index_topic_path(topic, partition)}/index?{query}")
        return int(body["index"])

    # -- namespaces and topics ----------------------------------------------------------------------
    def create_namespace(self, namespace: str, exist_ok: bool = False) -> None:
        """Create ``tenant/namespace`` (``ConflictError`` if it exists, unless ``exist_ok``)."""
        try:
            self._call("PUT", namespace_path(namespace))
        except ConflictError:
            if not exist_ok:
                raise

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        self._call("PUT", f"{topic_path(topic)}/partitions", partitions)

    def partition_count(self, topic: str) -> int:
        """Partitions of a partitioned topic; 0 for a non-partitioned (or unknown) one."""
        body = self._get(f"{topic_path(topic)}/partitions")
        return int(body.get("partitions", 0)) if body else 0

    def namespace_topics(self, namespace: str) -> list[str]:
        """Every persistent topic of ``tenant/namespace``, partitions included."""
        return list(self._get(f"/admin/v2/persistent/{namespace_parts(namespace)}") or [])

    def base_topics(self, namespace: str) -> list[str]:
        """The namespace's topics with partitions folded into their partitioned topic."""
        return sorted({split_partition(t)[0] for t in self.namespace_topics(namespace)})

    def topic_exists(self, topic: str) -> bool:
        """Whether a non-partitioned persistent topic (or one partition) exists.

        Listing the namespace needs a namespace-level grant (Pulsar's GET_TOPICS); a role granted
        only this topic asks for the topic's stats instead (404: not stored).
        """
        name = TopicName.parse(topic)
        try:
            return str(name) in self.namespace_topics(name.namespace_name)
        except ForbiddenError:
            try:
                self._get(f"{topic_path(topic)}/stats")
            except NotFoundError:
                return False
            return True

    def deduplication(self, namespace: str) -> bool | None:
        """The namespace's deduplication policy; None when unset (the broker default applies)."""
        body = self._get(f"{namespace_path(namespace)}/deduplication")
        return None if body is None else bool(body)

    def set_deduplication(self, namespace: str, enabled: bool) -> None:
        self._call("POST", f"{namespace_path(namespace)}/deduplication", enabled)

    # -- permissions (Pulsar's admin v2 paths; pulsar-admin's namespaces/topics methods) -----------
    def grant_permission_on_namespace(self, namespace: str, role: str, actions: list[str]) -> None:
        """Let ``role`` do ``actions`` (``produce``, ``consume``, ...) on ``tenant/namespace``."""
        self._call("POST", f"{namespace_path(namespace)}/permissions/{quote(role)}", actions)

    def revoke_permissions_on_namespace(self, namespace: str, role: str) -> None:
        self._call("DELETE", f"{namespace_path(namespace)}/permissions/{quote(role)}")

    def get_namespace_permissions(self, namespace: str) -> dict[str, list[str]]:
        return self._get(f"{namespace_path(namespace)}/permissions")

    def grant_permission(self, topic: str, role: str, actions: list[str]) -> None:
        """Let ``role`` do ``actions`` on this one topic (persistent or non-persistent)."""
        self._call("POST", f"{topic_path(topic)}/permissions/{quote(role)}", actions)

    def revoke_permissions(self, topic: str, role: str) -> None:
        """Remove ``role``'s topic-level grant (412, an ``AdminError``, if there is none)."""
        self._call("DELETE", f"{topic_path(topic)}/permissions/{quote(role)}")

    def get_permissions(self, topic: str) -> dict[str, list[str]]:
        """The namespace's grants and the topic's, merged (as Pulsar answers)."""
        return self._get(f"{topic_path(topic)}/permissions")

    # -- plumbing ---------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None) -> Any:
        """One call of the admin API (``path`` from ``/admin/v2/...``; ``params`` its query): the
        JSON answer, None for an empty one. Raises ``AdminError`` (a subclass by status) with the
        broker's reason, ``OSError`` (``urllib.error.URLError``) when the broker cannot be reached."""
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        return self._call(method, path, body)

    def request_bytes(
        self, method: str, path: str, params: dict[str, Any] | None = None
    ) -> tuple[bytes, dict[str, str]]:
        """One call whose answer is not JSON (a stored message: its payload as the body, its
        metadata as ``X-Pulsar-*`` headers): the body and the headers. Failures as ``request()``."""
        if params:
            path = f"{path}?{urllib.parse.urlencode(params)}"
        return self._send(method, path)

    @property
    def lookups(self) -> Lookups:
        """Which broker serves a topic, and its bundle (the Java client's ``admin.lookups()``)."""
        return Lookups(self)

    @property
    def topics(self) -> Topics:
        """Typed calls for topics and their subscriptions (the Java client's ``admin.topics()``)."""
        return Topics(self)

    def _get(self, path: str) -> Any:
        return self._call("GET", path)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """JSON in and out; None for an empty answer (204)."""
        text, _ = self._send(method, path, body)
        return json.loads(text) if text.strip() else None

    def _send(self, method: str, path: str, body: Any = None) -> tuple[bytes, dict[str, str]]:
        """The answer's body and headers (``body`` sent as JSON); ``AdminError`` for a refusal.
        Through the runner, when there is one."""
        if self.runner is None:
            return self._exchange(method, path, body)
        return self.runner(lambda: self._exchange(method, path, body), f"{method} {path}")

    def _exchange(self, method: str, path: str, body: Any) -> tuple[bytes, dict[str, str]]:
        url = self.http_url + path
        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as response:
                return response.read(), dict(response.headers.items())
        except urllib.error.HTTPError as exc:
            raise refusal(exc.code, _reason(exc), url) from None


def _reason(exc: urllib.error.HTTPError) -> str:
    """The broker's ``{"reason": ...}``, else the body, else the HTTP reason phrase."""
    text = exc.read().decode(errors="replace")
    try:
        reason = json.loads(text)["reason"]
    except (ValueError, KeyError, TypeError):
        reason = text or exc.reason
    return str(reason)
