"""The broker's HTTP port: health, metrics, topic stats and Pulsar's admin v2 API."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin import (
    auth,
    authz,
    index_api,
    messages_api,
    namespaces_api,
    permissions_api,
    schemas_api,
    stats_api,
    subscriptions_api,
    topics_api,
)

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def build_app(service: BrokerService) -> web.Application:
    app = web.Application(
        middlewares=[
            auth.middleware(
                service.authentication,
                service.config.authenticate_metrics_endpoint,
                service.authentication_successes,
                service.authentication_failures,
            ),
            authz.middleware(service, service.authorization_failures),
        ]
    )

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    namespaces_api.add_routes(app, service)
    permissions_api.add_routes(app, service)
    topics_api.add_routes(app, service)
    subscriptions_api.add_routes(app, service)
    stats_api.add_routes(app, service)
    messages_api.add_routes(app, service)
    index_api.add_routes(app, service)
    schemas_api.add_routes(app, service)
    registry = []  # built at the first scrape (metrics.py)

    async def metrics_page(request: web.Request) -> web.Response:
        # Imported here: prometheus_client takes 2 MiB that a broker nobody scrapes need not hold.
        from magnetar.admin import metrics

        if not registry:
            registry.append(metrics.build_registry(service))
        return metrics.response(registry[0])

    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/metrics/", metrics_page)
    app.router.add_get("/admin/v2/brokers/health", health)
    return app


async def start_admin_server(
    service: BrokerService, host: str, port: int | None, https: tuple[int, ssl.SSLContext] | None = None
) -> tuple[web.AppRunner, int | None, int | None]:
    """Serve the admin API on ``port`` (plain HTTP; None: not at all) and, given ``https`` (port,
    context), over TLS: the runner and the ports as bound (None for one not served)."""
    runner = web.AppRunner(build_app(service), access_log=None)
    await runner.setup()
    bound = None
    if port is not None:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    https_bound = None
    if https is not None:
        https_port, ssl_context = https
        tls_site = web.TCPSite(runner, host, https_port, ssl_context=ssl_context)
        await tls_site.start()
        https_bound = tls_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, bound, https_bound
