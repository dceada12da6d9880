"""The broker's HTTP port: health, metrics, topic stats, Pulsar's admin v2 API, and its WebSocket and
REST produce APIs (``magnetar.websocket``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin import (
    auth,
    authz,
    brokers_api,
    bundles_api,
    clusters_api,
    compaction_api,
    compaction_threshold_api,
    console_api,
    consumers_api,
    every_worker,
    http_refusal,
    inactive_topics_api,
    index_api,
    messages_api,
    namespaces_api,
    offload_api,
    owner_proxy,
    permissions_api,
    replication_api,
    schemas_api,
    stats_api,
    subscriptions_api,
    topics_api,
)
from magnetar.admin.owner_calls import OWNER_CALLS, OwnerCalls
from magnetar.broker.listener import Listener, listen
from magnetar.websocket import routes as websocket_routes

if TYPE_CHECKING:
    import ssl

    from magnetar.broker.service import BrokerService


def build_app(service: BrokerService, web_urls: clusters_api.WebUrls | None = None) -> web.Application:
    """``web_urls``: the admin API's URLs as bound (the clusters endpoint names them)."""
    app = web.Application(
        middlewares=[
            auth.middleware(
                service.authentication,
                service.config.authenticate_metrics_endpoint,
                service.authentication_successes,
                service.authentication_failures,
                service.worker_secret,
            ),
            authz.middleware(service, service.authorization_failures),
            owner_proxy.middleware(service),  # a worker's requests for another's topics
        ]
    )
    calls = app[OWNER_CALLS] = OwnerCalls(service)
    app.on_cleanup.append(calls.close)

    namespaces_api.add_routes(app, service)
    permissions_api.add_routes(app, service)
    topics_api.add_routes(app, service)
    subscriptions_api.add_routes(app, service)
    consumers_api.add_routes(app, service)
    stats_api.add_routes(app, service)
    messages_api.add_routes(app, service)
    index_api.add_routes(app, service)
    schemas_api.add_routes(app, service)
    clusters_api.add_routes(app, service, web_urls or (lambda: (None, None)))
    bundles_api.add_routes(app, service, web_urls or (lambda: (None, None)))
    replication_api.add_routes(app, service)
    inactive_topics_api.add_routes(app, service)
    compaction_api.add_routes(app, service)
    offload_api.add_routes(app, service)
    compaction_threshold_api.add_routes(app, service)
    websocket_routes.add_routes(app, service)  # the WebSocket API and REST produce (docs/websocket.md)
    brokers_api.add_routes(app, service)
    console_api.add_routes(app, service)  # the web console (docs/console.md)

    async def metrics_page(request: web.Request) -> web.Response:
        # Imported here: prometheus_client takes 2 MiB that a broker nobody scrapes need not hold.
        from magnetar.admin import metrics

        registry = await metrics.collected(service)
        if not every_worker.gathers(service, request):
            return metrics.response(await metrics.rendered(lambda: registry))
        parts = await every_worker.other_parts(service, request)
        me = service.namespace_service.broker_id
        return metrics.response(await metrics.rendered(lambda: metrics.workers_registry(registry, me, parts)))

    app.router.add_get("/metrics", metrics_page)
    app.router.add_get("/metrics/", metrics_page)
    return app


class AdminServer:
    """The broker's HTTP port (and HTTPS port) serving ``build_app``: ``await start()`` binds
    them, ``http_port`` and ``https_port`` are the ports as bound (None for one not served),
    ``await stop()`` closes them. The ports accept through the broker's listener, which answers
    503 when no file descriptor is left (http_refusal.py)."""

    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.http_port: int | None = None
        self.https_port: int | None = None
        self._runner: web.AppRunner | None = None
        self._listeners: list[Listener] = []

    async def start(self) -> None:
        """Serve plain HTTP on ``http_port`` unless ``web_service_port_enabled`` is off, and HTTPS
        on ``web_service_port_tls`` when set, with the broker's TLS context."""
        config = self.service.config
        self._runner = web.AppRunner(build_app(self.service, self.web_urls), access_log=None)
        await self._runner.setup()
        if config.web_service_port_enabled:
            self.http_port = await self._serve(config.http_port, "HTTP port (--http-port)")
        if (tls_port := config.web_service_port_tls) is not None:
            self.https_port = await self._serve(
                tls_port, "HTTPS port (web_service_port_tls)", self.service.ssl_context
            )

    def web_urls(self) -> tuple[str | None, str | None]:
        """(http://host:port, https://host:port) as bound; None for a port not served (a worker's:
        its own ports, not the shared ones)."""
        host = self.service.config.host
        http = f"http://{host}:{self.http_port}" if self.http_port is not None else None
        https = f"https://{host}:{self.https_port}" if self.https_port is not None else None
        return http, https

    async def _serve(self, port: int, setting: str, tls: ssl.SSLContext | None = None) -> int:
        """Accept on ``port`` for the runner's server (aiohttp's protocol factory); the port bound.
        A port that cannot be bound is a ``ListenError`` naming ``setting``."""
        assert self._runner is not None and self._runner.server is not None
        worker = self.service.worker
        name = f"the {setting.split(' (')[0]}"
        args = (self._runner.server, http_refusal.OUT_OF_DESCRIPTORS)
        host = self.service.config.host
        if worker is not None:  # the shared port, with the other workers, and one of its own
            shared = await listen(host, port, *args, name, setting, tls=tls, backlog=128, reuse_port=True)
            self._listeners.append(shared)
            port, name = 0, f"{name} of {worker.broker_id}"
        listener = await listen(host, port, *args, name, setting, tls=tls, backlog=128)  # aiohttp's backlog
        self._listeners.append(listener)
        return listener.port

    async def stop(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
