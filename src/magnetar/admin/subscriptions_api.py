"""Pulsar's admin v2 paths for a topic's subscriptions: list, create, delete, clear the backlog,
skip, expire messages older than some seconds, and reset the cursor by time or to a message id.

On a partitioned topic's own name each call applies to every partition, as in Pulsar. Paths,
under ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}``: ``/subscriptions``;
``/subscription/{sub}`` and, after it, ``/skip_all``, ``/skip/{n}``, ``/expireMessages/{seconds}``,
``/resetcursor/{timestamp}``, ``/resetcursor``; ``/all_subscription/expireMessages/{seconds}``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, persistent, topic_of, translate_errors
from magnetar.admin.partition_fanout import each_partition
from magnetar.broker.names import check_name
from magnetar.broker.offloaded_reads import PatientReader, answered
from magnetar.protocol import wire
from magnetar.protocol.message_id import to_u64

if TYPE_CHECKING:
    from magnetar.broker.nonpersistent import NonPersistentTopic
    from magnetar.broker.service import BrokerService
    from magnetar.broker.subscription import PersistentSubscription
    from magnetar.broker.topic import PersistentTopic
    from magnetar.protocol.topic_name import TopicName

#: Pulsar's MessageId JSON for "latest" (both fields Long.MAX_VALUE); -1/-1 is "earliest".
_LATEST = {"ledgerId": (1 << 63) - 1, "entryId": (1 << 63) - 1}


def message_id_data(body: object) -> tuple[wire.MessageIdData, int]:
    """Pulsar's ``{"ledgerId": .., "entryId": .., "partitionIndex": ..}``: the id and its partition."""
    if not isinstance(body, dict) or not all(isinstance(body.get(k), int) for k in ("ledgerId", "entryId")):
        raise ValueError('the body must be a message id: {"ledgerId": L, "entryId": E}')
    msg_id = wire.MessageIdData(ledger_id=to_u64(body["ledgerId"]), entry_id=to_u64(body["entryId"]))
    partition = body.get("partitionIndex", -1)
    if not isinstance(partition, int):
        raise ValueError("partitionIndex must be a number")
    return msg_id, partition


BASE = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subscription}"


def add_routes(app: web.Application, service: BrokerService) -> None:
    _list_routes(app, service)
    _lifecycle_routes(app, service)
    _cursor_routes(app, service)


def _names(service: BrokerService, request: web.Request, domain: str, partition: int = -1) -> list[TopicName]:
    """The topic, or every partition of a partitioned one (only ``partition`` if given: a
    message id names one)."""
    name = topic_of(request, domain)
    service.check_namespace(name)
    count = service.namespaces.partitions(str(name))
    if count and partition >= count:
        raise ValueError(f"partition {partition} of {name}, which has {count}")
    chosen = [partition] if partition >= 0 else range(count)
    return [name.partition(i) for i in chosen] if count else [name]


async def _on_topics(
    service: BrokerService,
    request: web.Request,
    domain: str,
    act: Callable[[PersistentTopic | NonPersistentTopic], Any],
    partition: int = -1,
) -> list[Any]:
    """``act`` on the topic, or on each partition (``_names``) where it is owned
    (partition_fanout.py), loaded on the way; the answers."""
    names = _names(service, request, domain, partition)
    return await each_partition(
        service, request, names, lambda name: act(service.get_topic(name, create=False))
    )


async def _on_persistent(
    service: BrokerService, request: web.Request, act: Callable[[PersistentTopic], Any], partition: int = -1
) -> list[Any]:
    return await _on_topics(service, request, "persistent", lambda topic: act(persistent(topic)), partition)


def _list_routes(app: web.Application, service: BrokerService) -> None:
    for domain in ("persistent", "non-persistent"):

        @translate_errors
        async def list_subscriptions(request: web.Request, domain: str = domain) -> web.Response:
            answers = await _on_topics(service, request, domain, lambda topic: sorted(topic.subscriptions))
            return web.json_response(sorted({name for names in answers for name in names}))

        app.router.add_get(
            f"/admin/v2/{domain}/{{tenant}}/{{namespace}}/{{topic}}/subscriptions", list_subscriptions
        )


def _lifecycle_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def create(request: web.Request) -> web.Response:
        msg_id, partition = message_id_data(await json_body(request, default=_LATEST))
        # Refused (400) as the binary protocol refuses it.
        check_name(request.match_info["subscription"], "subscription name")
        name = request.match_info["subscription"]
        await _on_persistent(
            service,
            request,
            lambda topic: topic.create_subscription(name, topic.seek_position(msg_id)),
            partition,
        )
        return no_content()

    @translate_errors
    async def delete(request: web.Request) -> web.Response:
        force = request.query.get("force", "false").lower() == "true"
        name = request.match_info["subscription"]
        await _on_persistent(service, request, lambda topic: topic.drop_subscription(name, force=force))
        return no_content()

    app.router.add_put(BASE, create)
    app.router.add_delete(BASE, delete)


#: What a path does to one topic's subscription (an awaitable where it may wait for offloaded data).
Action = Callable[["PersistentTopic", "PersistentSubscription", web.Request], "Awaitable[None] | None"]


def _on_each(service: BrokerService, action: Action):
    """A handler that applies ``action`` to the named subscription of every topic."""

    @translate_errors
    async def handler(request: web.Request) -> web.Response:
        name = request.match_info["subscription"]
        await _on_persistent(service, request, lambda topic: action(topic, topic.subscription(name), request))
        return no_content()

    return handler


def _clear_backlog(
    topic: PersistentTopic, subscription: PersistentSubscription, request: web.Request
) -> None:
    subscription.clear_backlog()


def _skip(topic: PersistentTopic, subscription: PersistentSubscription, request: web.Request) -> None:
    count = int(request.match_info["count"])
    if count < 0:
        raise ValueError("the number of messages to skip must not be negative")
    subscription.skip(count)


async def _reset_to_time(
    topic: PersistentTopic, subscription: PersistentSubscription, request: web.Request
) -> None:
    stamp, reader = int(request.match_info["timestamp"]), PatientReader(topic.ml)
    position = await answered(
        topic.ml, lambda: topic.find_position_by_time(stamp, reader), f"resetting {subscription.name} by time"
    )
    subscription.reset_cursor(position)


async def _expire(topic: PersistentTopic, subscription: PersistentSubscription, request: web.Request) -> None:
    await topic.expired_older_than(int(request.match_info["seconds"]), [subscription])


def _cursor_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def reset_to_message(request: web.Request) -> web.Response:
        msg_id, partition = message_id_data(await json_body(request))
        excluded = request.query.get("isExcluded", "false").lower() == "true"
        name = request.match_info["subscription"]

        def reset(topic: PersistentTopic) -> None:
            position = topic.seek_position(msg_id)
            if excluded:
                position = topic.ml.next_position(position)
            topic.subscription(name).reset_cursor(position)

        await _on_persistent(service, request, reset, partition)
        return no_content()

    @translate_errors
    async def expire_all(request: web.Request) -> web.Response:
        seconds = int(request.match_info["seconds"])
        await _on_persistent(service, request, lambda topic: topic.expired_older_than(seconds))
        return no_content()

    app.router.add_post(f"{BASE}/skip_all", _on_each(service, _clear_backlog))
    app.router.add_post(f"{BASE}/skip/{{count:-?[0-9]+}}", _on_each(service, _skip))
    app.router.add_post(f"{BASE}/resetcursor/{{timestamp:[0-9]+}}", _on_each(service, _reset_to_time))
    app.router.add_post(f"{BASE}/resetcursor", reset_to_message)
    app.router.add_post(f"{BASE}/expireMessages/{{seconds:[0-9]+}}", _on_each(service, _expire))
    app.router.add_post(
        "/admin/v2/persistent/{tenant}/{namespace}/{topic}/all_subscription/expireMessages/{seconds:[0-9]+}",
        expire_all,
    )
