"""Clusters through the admin API (``admin.clusters``): the broker's own cluster, and remote ones
registered for geo-replication (Pulsar's ClusterData)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.client.admin.paths import quote

if TYPE_CHECKING:
    from magnetar.client.admin.requests import AdminRequests

CLUSTERS = "/admin/v2/clusters"


def cluster_data(
    service_url: str | None = None,
    broker_service_url: str | None = None,
    service_url_tls: str | None = None,
    broker_service_url_tls: str | None = None,
    **more: Any,
) -> dict[str, Any]:
    """Pulsar's ClusterData of what is given; ``more`` under Pulsar's names (``authenticationPlugin``,
    ``authenticationParameters``, ``brokerClientTlsEnabled``, ``tlsAllowInsecureConnection``,
    ``brokerClientTrustCertsFilePath``...)."""
    fields = {
        "serviceUrl": service_url,
        "serviceUrlTls": service_url_tls,
        "brokerServiceUrl": broker_service_url,
        "brokerServiceUrlTls": broker_service_url_tls,
        **more,
    }
    return {name: value for name, value in fields.items() if value is not None}


class Clusters:
    """The clusters the broker knows, one's ClusterData, and remote ones registered, updated and
    deleted (superuser calls)."""

    def __init__(self, admin: AdminRequests) -> None:
        self._admin = admin

    def list(self) -> list[str]:
        return list(self._admin.request("GET", CLUSTERS) or [])

    def get(self, cluster: str) -> dict[str, Any]:
        """``{"serviceUrl", "brokerServiceUrl", ...}`` (the TLS ones when served)."""
        return self._admin.request("GET", f"{CLUSTERS}/{quote(cluster)}")

    def create(self, cluster: str, data: dict[str, Any]) -> None:
        """Register a remote cluster (``ConflictError`` if known); ``data``: ``cluster_data(...)``."""
        self._admin.request("PUT", f"{CLUSTERS}/{quote(cluster)}", data)

    def update(self, cluster: str, data: dict[str, Any]) -> None:
        """Replace a remote cluster's data (``NotFoundError`` if not registered)."""
        self._admin.request("POST", f"{CLUSTERS}/{quote(cluster)}", data)

    def delete(self, cluster: str) -> None:
        """Forget a remote cluster (refused, 412, while a namespace or topic replicates to it)."""
        self._admin.request("DELETE", f"{CLUSTERS}/{quote(cluster)}")
