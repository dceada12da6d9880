"""Clusters through the admin API (``admin.clusters``): a broker is one cluster, read only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.client.admin.core import quote

if TYPE_CHECKING:
    from magnetar.client.admin.core import AdminClient

CLUSTERS = "/admin/v2/clusters"


class Clusters:
    """The clusters the broker names, and one's ClusterData (its service URLs)."""

    def __init__(self, admin: AdminClient) -> None:
        self._admin = admin

    def list(self) -> list[str]:
        return list(self._admin.request("GET", CLUSTERS) or [])

    def get(self, cluster: str) -> dict[str, Any]:
        """``{"serviceUrl", "brokerServiceUrl", ...}`` (the TLS ones when served)."""
        return self._admin.request("GET", f"{CLUSTERS}/{quote(cluster)}")
