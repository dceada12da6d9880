"""The broker's HTTP port: health, metrics, topic stats and Pulsar's admin v2 API."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin import index_api, namespaces_api, schemas_api, subscriptions_api, topics_api
from magnetar.broker.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.traffic import Traffic


def _topic_stats(service: BrokerService, name: TopicName) -> dict:
    topic = service.topics.get(str(name))
    if topic is None:
        raise web.HTTPNotFound(text=f"Topic {name} not found or not loaded")
    subscriptions = {}
    for sub_name, sub in topic.subscriptions.items():
        subscriptions[sub_name] = {
            **_out(sub.traffic),
            "msgBacklog": sub.cursor.backlog(),
            "durable": sub.durable,
            "type": None if sub.sub_type is None else _sub_type_name(sub.sub_type),
            "markDeletePosition": str(sub.cursor.mark_delete_position),
            "readPosition": str(sub.cursor.read_position),
            "individuallyDeletedMessages": sub.cursor.individually_deleted_count(),
            "ackState": sub.cursor.stats(),
            "consumers": [
                {
                    "consumerName": c.name,
                    **_out(c.traffic),
                    "availablePermits": c.permits,
                    "unackedMessages": len(c.pending_acks),
                }
                for c in sub.consumers
            ],
        }
    return {
        **_in(topic.traffic),
        **_out(topic.traffic),
        "storageSize": topic.ml.size_bytes(),
        "publishers": [
            {"producerId": p.producer_id, "producerName": p.name, **_in(p.traffic)}
            for p in topic.producers.values()
        ],
        "subscriptions": subscriptions,
        "ledgers": [
            {"ledgerId": info.ledger_id, "entries": info.entries, "size": info.size_bytes}
            for info in topic.ml.ledgers()
        ],
        "lastConfirmedEntry": str(topic.ml.last_confirmed),
    }


def _in(traffic: Traffic) -> dict:
    """Pulsar's inbound stats fields; the rates are over the last stats interval."""
    return {
        "msgRateIn": traffic.rate_in,
        "msgThroughputIn": traffic.throughput_in,
        "averageMsgSize": traffic.average_message_size_in,
        "msgInCounter": traffic.messages_in,
        "bytesInCounter": traffic.bytes_in,
    }


def _out(traffic: Traffic) -> dict:
    return {
        "msgRateOut": traffic.rate_out,
        "msgThroughputOut": traffic.throughput_out,
        "msgOutCounter": traffic.messages_out,
        "bytesOutCounter": traffic.bytes_out,
    }


def _sub_type_name(sub_type: int) -> str:
    from magnetar.protocol import wire

    return wire.CommandSubscribe.SubType.Name(sub_type)


def build_app(service: BrokerService) -> web.Application:
    app = web.Application()

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def stats(request: web.Request) -> web.Response:
        m = request.match_info
        try:
            name = TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        except InvalidTopicName as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        return web.json_response(_topic_stats(service, name))

    namespaces_api.add_routes(app, service)
    topics_api.add_routes(app, service)
    subscriptions_api.add_routes(app, service)
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
    app.router.add_get("/admin/v2/persistent/{tenant}/{namespace}/{topic}/stats", stats)
    return app


async def start_admin_server(service: BrokerService, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(build_app(service), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, bound
