"""The paths of the WebSocket API and the REST produce API on the broker's HTTP app."""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.websocket import rest_produce, ws_consumer, ws_producer

if TYPE_CHECKING:
    from aiohttp import web

    from magnetar.broker.service import BrokerService

DOMAINS = ("persistent", "non-persistent")


def add_routes(app: web.Application, service: BrokerService) -> None:
    """Pulsar's paths: the WebSocket API unless ``web_socket_service_enabled`` is off; REST
    produce always, as Pulsar's broker serves it."""
    router = app.router
    for domain in DOMAINS:
        base = f"{domain}/{{tenant}}/{{namespace}}/{{topic}}"
        if service.config.web_socket_service_enabled:
            router.add_get(f"/ws/v2/producer/{base}", ws_producer.handler(service, domain))
            router.add_get(
                f"/ws/v2/consumer/{base}/{{subscription}}", ws_consumer.consumer_handler(service, domain)
            )
            router.add_get(f"/ws/v2/reader/{base}", ws_consumer.reader_handler(service, domain))
        router.add_post(f"/topics/{base}", rest_produce.handler(service, domain))
        router.add_post(f"/topics/{base}/partitions/{{partition}}", rest_produce.handler(service, domain))
