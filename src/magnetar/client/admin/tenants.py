"""Tenants through the admin API (``admin.tenants``, as the Java PulsarAdmin's ``tenants()``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from magnetar.client.admin.paths import quote

if TYPE_CHECKING:
    from magnetar.client.admin.requests import AdminRequests

TENANTS = "/admin/v2/tenants"


def tenant_info(allowed_clusters: Sequence[str] | None, admin_roles: Sequence[str] | None) -> dict[str, Any]:
    """Pulsar's TenantInfo; None for ``allowed_clusters`` leaves them out, and the broker allows
    its own cluster (its ``cluster_name``)."""
    info: dict[str, Any] = {"adminRoles": list(admin_roles or [])}
    if allowed_clusters is not None:
        info["allowedClusters"] = list(allowed_clusters)
    return info


class Tenants:
    """List, read, create, update and delete tenants (superuser calls when authorization is on)."""

    def __init__(self, admin: AdminRequests) -> None:
        self._admin = admin

    def list(self) -> list[str]:
        return list(self._admin.request("GET", TENANTS) or [])

    def get(self, tenant: str) -> dict[str, Any]:
        """The tenant's TenantInfo: ``{"adminRoles": [...], "allowedClusters": [...]}``."""
        return self._admin.request("GET", f"{TENANTS}/{quote(tenant)}")

    def create(
        self,
        tenant: str,
        allowed_clusters: Sequence[str] | None = None,
        admin_roles: Sequence[str] | None = None,
    ) -> None:
        """Create ``tenant`` (``ConflictError`` if it exists)."""
        self._admin.request("PUT", f"{TENANTS}/{quote(tenant)}", tenant_info(allowed_clusters, admin_roles))

    def update(
        self,
        tenant: str,
        allowed_clusters: Sequence[str] | None = None,
        admin_roles: Sequence[str] | None = None,
    ) -> None:
        """Replace what is given of the tenant's info; what is None keeps its value."""
        current = self.get(tenant)
        info = {
            "adminRoles": list(admin_roles) if admin_roles is not None else current.get("adminRoles", []),
            "allowedClusters": (
                list(allowed_clusters) if allowed_clusters is not None else current.get("allowedClusters", [])
            ),
        }
        self._admin.request("POST", f"{TENANTS}/{quote(tenant)}", info)

    def delete(self, tenant: str) -> None:
        """Delete ``tenant`` (``ConflictError`` while it has namespaces)."""
        self._admin.request("DELETE", f"{TENANTS}/{quote(tenant)}")
