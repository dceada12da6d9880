"""Pulsar's admin v2 cluster paths, read only: ``GET /admin/v2/clusters`` (this broker's cluster,
``cluster_name``, as a one-name list) and ``GET /admin/v2/clusters/{cluster}`` (its ClusterData:
the URLs clients and pulsar-admin reach it at). Superusers only, as tenants (authz.py).

Geo-replication (adding clusters with PUT) is not served: one broker is one cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import reason_error, translate_errors

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

#: The admin API's own URLs as bound: (http://..., https://...), None for a port not served.
WebUrls = Callable[[], tuple[str | None, str | None]]


def cluster_data(service: BrokerService, web_urls: WebUrls) -> dict[str, str]:
    """Pulsar's ClusterData of this broker: the URLs that are served, no others."""
    http_url, https_url = web_urls()
    fields = {
        "serviceUrl": http_url,
        "serviceUrlTls": https_url,
        "brokerServiceUrl": service.service_url,
        "brokerServiceUrlTls": service.service_url_tls,
    }
    return {name: value for name, value in fields.items() if value is not None}


def add_routes(app: web.Application, service: BrokerService, web_urls: WebUrls) -> None:
    @translate_errors
    async def list_clusters(request):
        return web.json_response([service.config.cluster_name])

    @translate_errors
    async def get_cluster(request):
        name = request.match_info["cluster"]
        if name != service.config.cluster_name:
            raise reason_error(web.HTTPNotFound, f"Cluster {name} does not exist")
        return web.json_response(cluster_data(service, web_urls))

    app.router.add_get("/admin/v2/clusters", list_clusters)
    app.router.add_get("/admin/v2/clusters/{cluster}", get_cluster)
