"""A remote cluster as a replicator reaches it: a client on its broker service URL and an admin
client on its HTTP one, with the TLS and authentication its ClusterData names.

One ``Remote`` per cluster is shared by every replicator to it (one connection pool), and made
again when the cluster's data changes.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from magnetar.client.admin import AdminClient
from magnetar.client.admin.errors import AdminError, NotFoundError
from magnetar.client.aio import AuthenticationTLS, Client
from magnetar.client.authentication import AuthenticationToken
from magnetar.protocol.topic_name import TopicName

#: Pulsar's class names of the authentication plugins a ClusterData may name.
TOKEN_PLUGINS = ("org.apache.pulsar.client.impl.auth.AuthenticationToken", "token")
TLS_PLUGINS = ("org.apache.pulsar.client.impl.auth.AuthenticationTls", "tls")


class RemoteConfigError(ValueError):
    """ClusterData a replicator cannot use (no broker URL, an authentication plugin not known)."""


def token_of(parameters: str) -> str:
    """The token in Pulsar's AuthenticationToken parameters: ``token:<jwt>``, ``file:<path>``, a
    JSON ``{"token": ...}``, or the bare token."""
    parameters = parameters.strip()
    if parameters.startswith("token:"):
        return parameters[len("token:") :]
    if parameters.startswith("file:"):
        path = parameters[len("file:") :].removeprefix("//")
        with open(path) as f:
            return f.read().strip()
    if parameters.startswith("{"):
        return str(json.loads(parameters)["token"])
    return parameters


def tls_files_of(parameters: str) -> tuple[str, str]:
    """Certificate and key paths in AuthenticationTls parameters (``tlsCertFile:a,tlsKeyFile:b``
    or JSON)."""
    if parameters.strip().startswith("{"):
        values = json.loads(parameters)
    else:
        values = dict(part.split(":", 1) for part in parameters.split(",") if ":" in part)
    try:
        return values["tlsCertFile"], values["tlsKeyFile"]
    except KeyError:
        raise RemoteConfigError("AuthenticationTls needs tlsCertFile and tlsKeyFile") from None


def client_options(data: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The service URL and client options a ClusterData asks for."""
    use_tls = bool(data.get("brokerClientTlsEnabled")) and "brokerServiceUrlTls" in data
    url = data.get("brokerServiceUrlTls") if use_tls else data.get("brokerServiceUrl")
    if not url:
        raise RemoteConfigError("the cluster has no brokerServiceUrl to replicate to")
    options: dict[str, Any] = {}
    if url.startswith("pulsar+ssl://"):
        options["tls_trust_certs_file_path"] = data.get("brokerClientTrustCertsFilePath")
        options["tls_allow_insecure_connection"] = bool(data.get("tlsAllowInsecureConnection"))
    plugin = data.get("authenticationPlugin")
    parameters = data.get("authenticationParameters", "")
    if plugin in TOKEN_PLUGINS:
        options["authentication"] = AuthenticationToken(token_of(parameters))
    elif plugin in TLS_PLUGINS:
        options["authentication"] = AuthenticationTLS(*tls_files_of(parameters))
    elif plugin:
        raise RemoteConfigError(f"authentication plugin {plugin} is not supported for replication")
    return url, options


def admin_options(data: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The HTTP URL and admin-client options a ClusterData asks for (None: no admin URL)."""
    use_tls = bool(data.get("brokerClientTlsEnabled")) and "serviceUrlTls" in data
    url = data.get("serviceUrlTls") if use_tls or "serviceUrl" not in data else data.get("serviceUrl")
    options: dict[str, Any] = {}
    if url and url.startswith("https://"):
        options["tls_trust_certs_file_path"] = data.get("brokerClientTrustCertsFilePath")
        options["tls_allow_insecure_connection"] = bool(data.get("tlsAllowInsecureConnection"))
    plugin = data.get("authenticationPlugin")
    parameters = data.get("authenticationParameters", "")
    if plugin in TOKEN_PLUGINS:
        options["token"] = token_of(parameters)
    elif plugin in TLS_PLUGINS:  # the remote authenticates its HTTP callers by certificate too
        options["tls_certificate_file_path"], options["tls_key_file_path"] = tls_files_of(parameters)
    return url, options


class Remote:
    """One remote cluster: its name, its data, a client and an admin client for it."""

    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.name = name
        self.data = data
        url, options = client_options(data)
        self.client = Client(url, operation_timeout_seconds=30, max_backoff_seconds=10, **options)
        admin_url, admin = admin_options(data)
        self.admin = AdminClient(admin_url, timeout=10, **admin) if admin_url else None

    async def ensure_partitions(self, topic: TopicName, partitions: int) -> None:
        """Make sure the remote has ``topic``'s partitioned topic with at least ``partitions``
        partitions, as Pulsar's replicator creates it (createTopicToRemoteClusterForReplication),
        so a partition replicated is a partition there too, not a topic of its own."""
        if self.admin is None:
            return
        base = str(topic.partitioned_base() or topic)
        await asyncio.to_thread(self._ensure_partitions, base, partitions)

    def _ensure_partitions(self, base: str, partitions: int) -> None:
        assert self.admin is not None
        try:
            have = self.admin.partition_count(base)
        except NotFoundError:
            have = 0
        if have == 0:
            try:
                self.admin.create_partitioned_topic(base, partitions)
            except AdminError as exc:
                if exc.status != 409:
                    raise
        elif have < partitions:
            raise RemoteConfigError(f"{base} has {have} partitions on cluster {self.name}, {partitions} here")

    async def close(self) -> None:
        await self.client.close()
