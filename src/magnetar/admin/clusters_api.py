"""Pulsar's admin v2 cluster paths: ``GET /admin/v2/clusters`` (this broker's ``cluster_name`` and
the remote clusters registered), ``GET /admin/v2/clusters/{cluster}`` (the local one's ClusterData:
the URLs this broker serves; a remote's: as stored), and ``PUT`` (register), ``POST`` (update) and
``DELETE`` (forget; 412 while a namespace or topic replicates to it) of a remote cluster, for
geo-replication (broker/clusters.py). Superusers only, as tenants (authz.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, translate_errors

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


def cluster_users(service: BrokerService, cluster: str) -> list[str]:
    """The namespaces and topics whose replication clusters name ``cluster``."""
    topics = [t for t, clusters in service.topic_replication.all().items() if cluster in clusters]
    return service.namespaces.replication_users(cluster) + topics


def add_routes(app: web.Application, service: BrokerService, web_urls: WebUrls) -> None:
    @translate_errors
    async def list_clusters(request):
        return web.json_response(service.clusters.names())

    @translate_errors
    async def get_cluster(request):
        name = request.match_info["cluster"]
        if name == service.config.cluster_name:
            return web.json_response(cluster_data(service, web_urls))
        return web.json_response(service.clusters.get(name))

    @translate_errors
    async def put_cluster(request):
        service.clusters.create(request.match_info["cluster"], await json_body(request))
        return no_content()

    @translate_errors
    async def post_cluster(request):
        service.clusters.update(request.match_info["cluster"], await json_body(request))
        return no_content()

    @translate_errors
    async def delete_cluster(request):
        name = request.match_info["cluster"]
        service.clusters.delete(name, cluster_users(service, name))
        return no_content()

    app.router.add_get("/admin/v2/clusters", list_clusters)
    app.router.add_get("/admin/v2/clusters/{cluster}", get_cluster)
    app.router.add_put("/admin/v2/clusters/{cluster}", put_cluster)
    app.router.add_post("/admin/v2/clusters/{cluster}", post_cluster)
    app.router.add_delete("/admin/v2/clusters/{cluster}", delete_cluster)
