"""A small blocking client for Magnetar's admin HTTP API: the message index look-ups, and
granting, listing and revoking permissions (Pulsar's admin v2 permission paths).

    from magnetar.admin.client import AdminClient

    admin = AdminClient("http://127.0.0.1:8080")
    msg_id = admin.message_id_for_index("persistent://public/default/t", 41)
    admin.index_for_message_id("persistent://public/default/t", msg_id)  # -> 41

Indexes are per topic partition: name the partition (``t-partition-2``), or pass a message
id whose ``partition()`` says which. Failures raise ``AdminError`` (``NotFoundError`` for an
unknown topic or an index or message id not stored, ``ConflictError`` when the broker's index
interceptor is off, ``UnauthorizedError`` (401) for missing or refused credentials,
``ForbiddenError`` (403) for a role without the right) carrying the HTTP status and the
broker's reason. Standard library only (urllib), so it runs anywhere, in Spark executors too.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from magnetar.broker.topic_name import PARTITION_SUFFIX, TopicName
from magnetar.client.message import MessageId


class AdminError(Exception):
    """The broker refused an admin request: ``status`` is the HTTP status, ``reason`` its text."""

    def __init__(self, status: int, reason: str, url: str = "") -> None:
        super().__init__(f"HTTP {status}: {reason}")
        self.status = status
        self.reason = reason
        self.url = url


class NotFoundError(AdminError):
    pass


class ConflictError(AdminError):
    pass


class UnauthorizedError(AdminError):
    """401: no credentials, or credentials the broker refused."""


class ForbiddenError(AdminError):
    """403: the credentials are good, but their role may not do this (authorization)."""


def _topic_parts(topic: str, partition: int = -1) -> list[str]:
    """``[tenant, namespace, local]`` of a persistent topic, short names as Pulsar reads them."""
    parsed = TopicName.parse(topic)  # raises InvalidTopicName, a ValueError
    if not parsed.persistent:
        raise ValueError(f"only persistent topics have a message index, not {topic!r}")
    local = parsed.local_name
    if partition >= 0 and PARTITION_SUFFIX not in local:
        local = f"{local}{PARTITION_SUFFIX}{partition}"
    return [parsed.tenant, parsed.namespace, local]


def _topic_path(topic: str, partition: int = -1) -> str:
    return "/".join(urllib.parse.quote(p, safe="") for p in _topic_parts(topic, partition))


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _namespace_path(namespace: str) -> str:
    tenant, _, name = namespace.partition("/")
    if not tenant or not name or "/" in name:
        raise ValueError(f"a namespace is tenant/namespace, not {namespace!r}")
    return f"{_q(tenant)}/{_q(name)}"


def _any_topic_path(topic: str) -> str:
    """``/admin/v2/{domain}/{tenant}/{namespace}/{topic}`` of a topic of either domain."""
    parsed = TopicName.parse(topic)
    parts = (parsed.tenant, parsed.namespace, parsed.local_name)
    return f"/admin/v2/{parsed.domain}/" + "/".join(_q(p) for p in parts)


def _message_id_parts(message_id: Any) -> tuple[int, int, int, int]:
    """(ledger, entry, batch index, partition) of a message id in any of the accepted forms."""
    if isinstance(message_id, dict):
        return (
            int(message_id["ledgerId"]),
            int(message_id["entryId"]),
            int(message_id.get("batchIndex", -1)),
            int(message_id.get("partition", -1)),
        )
    if isinstance(message_id, tuple | list):
        ledger, entry, *rest = message_id
        return int(ledger), int(entry), int(rest[0]) if rest else -1, -1
    # magnetar.client.MessageId and the official pulsar.MessageId name their parts alike.
    return (
        message_id.ledger_id(),
        message_id.entry_id(),
        message_id.batch_index(),
        message_id.partition() if hasattr(message_id, "partition") else -1,
    )


class AdminClient:
    """Blocking calls to a broker's admin HTTP port (``http_url``, e.g. ``http://host:8080``), or
    its HTTPS port (``https://host:8443``): the broker's certificate is checked against
    ``tls_trust_certs_file_path`` (the system's CAs without it) and must name the URL's host unless
    ``tls_validate_hostname`` is off; ``tls_allow_insecure_connection`` checks nothing. With
    ``tls_certificate_file_path`` and ``tls_key_file_path`` the client presents its certificate
    (a broker requiring trusted client certificates wants one)."""

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
    ) -> None:
        """``token``: sent as ``Authorization: Bearer <token>`` when the broker authenticates
        (the token text, or a function returning a fresh one for each call)."""
        self.http_url = http_url.rstrip("/")
        self.timeout = timeout
        self.token = token
        self._ssl: ssl.SSLContext | None = None
        if self.http_url.startswith("https://"):
            self._ssl = _https_context(
                tls_trust_certs_file_path,
                tls_validate_hostname,
                tls_allow_insecure_connection,
                tls_certificate_file_path,
                tls_key_file_path,
            )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token is not None:
            token = self.token() if callable(self.token) else self.token
            headers["Authorization"] = f"Bearer {token.strip()}"
        return headers

    def message_id_for_index(self, topic: str, index: int) -> MessageId:
        """The id of the message with ``index`` on ``topic`` (a plain topic or one partition).

        The result is a ``magnetar.client.MessageId`` (partition, ledger, entry, batch index)
        that readers and ``seek`` accept.
        """
        body = self._get(f"/admin/v2/persistent/{_topic_path(topic)}/messageid/{int(index)}")
        return MessageId(
            int(body["partition"]),
            int(body["ledgerId"]),
            int(body["entryId"]),
            int(body["batchIndex"]),
            topic="persistent://" + "/".join(_topic_parts(topic)),
        )

    def index_for_message_id(self, topic: str, message_id: Any) -> int:
        """The index of the message ``message_id`` on ``topic``.

        ``message_id``: a ``magnetar.client.MessageId``, an official ``pulsar.MessageId``, a
        ``(ledger_id, entry_id[, batch_index])`` tuple or a dict with ``ledgerId``, ``entryId``
        and optionally ``batchIndex`` and ``partition``. Without a batch index, a batch entry
        answers the index of its last message.
        """
        ledger, entry, batch_index, partition = _message_id_parts(message_id)
        query = urllib.parse.urlencode({"ledgerId": ledger, "entryId": entry, "batchIndex": batch_index})
        body = self._get(f"/admin/v2/persistent/{_topic_path(topic, partition)}/index?{query}")
        return int(body["index"])

    # -- permissions (Pulsar's admin v2 paths; pulsar-admin's namespaces/topics methods) -----------
    def grant_permission_on_namespace(self, namespace: str, role: str, actions: list[str]) -> None:
        """Let ``role`` do ``actions`` (``produce``, ``consume``, ...) on ``tenant/namespace``."""
        path = f"/admin/v2/namespaces/{_namespace_path(namespace)}/permissions/{_q(role)}"
        self._call("POST", path, actions)

    def revoke_permissions_on_namespace(self, namespace: str, role: str) -> None:
        self._call("DELETE", f"/admin/v2/namespaces/{_namespace_path(namespace)}/permissions/{_q(role)}")

    def get_namespace_permissions(self, namespace: str) -> dict[str, list[str]]:
        return self._get(f"/admin/v2/namespaces/{_namespace_path(namespace)}/permissions")

    def grant_permission(self, topic: str, role: str, actions: list[str]) -> None:
        """Let ``role`` do ``actions`` on this one topic (persistent or non-persistent)."""
        self._call("POST", f"{_any_topic_path(topic)}/permissions/{_q(role)}", actions)

    def revoke_permissions(self, topic: str, role: str) -> None:
        """Remove ``role``'s topic-level grant (412, an ``AdminError``, if there is none)."""
        self._call("DELETE", f"{_any_topic_path(topic)}/permissions/{_q(role)}")

    def get_permissions(self, topic: str) -> dict[str, list[str]]:
        """The namespace's grants and the topic's, merged (as Pulsar answers)."""
        return self._get(f"{_any_topic_path(topic)}/permissions")

    # -- plumbing ---------------------------------------------------------------------------------
    def _get(self, path: str) -> dict:
        return self._call("GET", path)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        url = self.http_url + path
        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as response:
                text = response.read()
                return json.loads(text) if text else None
        except urllib.error.HTTPError as exc:
            raise _admin_error(exc, url) from None


def _https_context(
    trust: str | None, validate_hostname: bool, insecure: bool, cert: str | None, key: str | None
) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=trust)
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx.check_hostname = validate_hostname
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _admin_error(exc: urllib.error.HTTPError, url: str) -> AdminError:
    text = exc.read().decode(errors="replace")
    try:
        reason = json.loads(text)["reason"]
    except (ValueError, KeyError, TypeError):
        reason = text or exc.reason
    cls = {401: UnauthorizedError, 403: ForbiddenError, 404: NotFoundError, 409: ConflictError}.get(
        exc.code, AdminError
    )
    return cls(exc.code, str(reason), url)
