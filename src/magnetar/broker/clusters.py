"""Remote clusters for geo-replication, kept in the metadata store (``cluster/{name}``).

Pulsar's model: a cluster is a name and its ClusterData (the URLs a replicator reaches it at, and
the TLS/authentication parameters it uses there). This broker's own cluster is ``cluster_name``;
it is not stored here (its ClusterData is the URLs this broker serves, clusters_api.py).
"""

from __future__ import annotations

import json
import re
from typing import Any

from magnetar.broker.errors import NotAllowed, TopicNotFound
from magnetar.broker.namespaces import AlreadyExists

#: ClusterData's URL fields and the schemes each accepts (Pulsar's names).
URL_FIELDS: dict[str, tuple[str, ...]] = {
    "serviceUrl": ("http://",),
    "serviceUrlTls": ("https://",),
    "brokerServiceUrl": ("pulsar://",),
    "brokerServiceUrlTls": ("pulsar+ssl://",),
    "proxyServiceUrl": ("pulsar://", "pulsar+ssl://"),
}
STRING_FIELDS = (
    "authenticationPlugin",
    "authenticationParameters",
    "brokerClientTrustCertsFilePath",
    "brokerClientCertificateFilePath",
    "brokerClientKeyFilePath",
    "listenerName",
)
BOOL_FIELDS = ("brokerClientTlsEnabled", "tlsAllowInsecureConnection")

_NAME = re.compile(r"^[-=:.\w]+$")


class ClusterNotFound(TopicNotFound):
    pass


def check_cluster_name(name: str) -> str:
    """A cluster name as Pulsar accepts it (letters, digits, ``-=:._``); ValueError otherwise."""
    if not _NAME.match(name) or name == "global":
        raise ValueError(f"Invalid cluster name {name!r}")
    return name


def check_cluster_data(data: Any) -> dict[str, Any]:
    """Pulsar's ClusterData JSON: the known fields given, typed and with URLs of the right scheme.

    At least one of serviceUrl and serviceUrlTls, as Pulsar asks; unknown fields are dropped."""
    if not isinstance(data, dict):
        raise ValueError('cluster data must be a JSON object: {"serviceUrl": ..., "brokerServiceUrl": ...}')
    out: dict[str, Any] = {}
    for key, schemes in URL_FIELDS.items():
        value = data.get(key)
        if value in (None, ""):
            continue
        if not isinstance(value, str) or not value.startswith(schemes):
            raise ValueError(f"{key} must be a URL starting with {' or '.join(schemes)}: {value!r}")
        out[key] = value
    for key in STRING_FIELDS:
        value = data.get(key)
        if value is not None:
            if not isinstance(value, str):
                raise ValueError(f"{key} must be a string")
            out[key] = value
    for key in BOOL_FIELDS:
        value = data.get(key)
        if value is not None:
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false")
            out[key] = value
    if "serviceUrl" not in out and "serviceUrlTls" not in out:
        raise ValueError("ServiceUrl or ServiceUrlTls must be set")
    return out


class ClusterRegistry:
    """Durable remote clusters by name; ``local`` is this broker's cluster_name, known but not stored."""

    def __init__(self, metadata, local: str) -> None:
        self._kv = metadata
        self.local = local

    def names(self) -> list[str]:
        """Every known cluster: the local one and those registered, sorted."""
        return sorted({self.local, *(k.removeprefix("cluster/") for k in self._kv.keys("cluster/"))})

    def known(self, name: str) -> bool:
        return name == self.local or self._kv.get(f"cluster/{name}") is not None

    def unknown(self, names: list[str]) -> list[str]:
        return [n for n in names if not self.known(n)]

    def get(self, name: str) -> dict[str, Any]:
        raw = self._kv.get(f"cluster/{name}")
        if raw is None:
            raise ClusterNotFound(f"Cluster {name} does not exist")
        return json.loads(raw)

    def create(self, name: str, data: dict[str, Any]) -> None:
        check_cluster_name(name)
        if self.known(name):
            raise AlreadyExists(f"Cluster {name} already exists")
        self._kv.put(f"cluster/{name}", json.dumps(check_cluster_data(data)))

    def update(self, name: str, data: dict[str, Any]) -> None:
        if name == self.local:
            raise NotAllowed(f"Cluster {name} is this broker's own cluster: its URLs are those it serves")
        self.get(name)
        self._kv.put(f"cluster/{name}", json.dumps(check_cluster_data(data)))

    def delete(self, name: str, users: list[str]) -> None:
        """Forget ``name``; refused while ``users`` (namespaces or topics replicating to it) is not empty."""
        if name == self.local:
            raise NotAllowed(f"Cluster {name} is this broker's own cluster")
        self.get(name)
        if users:
            raise NotAllowed(f"Cluster {name} is still used by {', '.join(users)}")
        self._kv.delete(f"cluster/{name}")
