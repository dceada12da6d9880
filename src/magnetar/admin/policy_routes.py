"""Routes for a policy that a namespace or a topic holds, built the one way Pulsar's admin answers
them: GET shows the policy (204 when not set, or what the caller says stands for "not set"), a
write checks the namespace exists (404 first), then the body, then stores the value; DELETE unsets
it. A topic's GET with ``?applied=true`` answers what applies to it (its own, else its
namespace's, else the broker's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, topic_of, translate_errors

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.topic_name import TopicName

Parse = Callable[[Any, str], Any]
"""The request's JSON body and its tenant to the value stored (ValueError or a BrokerError refuses it)."""

WRITES = ("POST", "PUT")


class TopicPolicyStore(Protocol):
    """The per-topic store of one policy (broker/resources.py)."""

    def get(self, topic: TopicName) -> Any: ...
    def set(self, topic: TopicName, value: Any, /) -> None: ...
    def remove(self, topic: TopicName) -> None: ...


def namespace_of(request: web.Request) -> str:
    """The ``tenant/namespace`` a ``.../{tenant}/{namespace}/...`` path names."""
    return f"{request.match_info['tenant']}/{request.match_info['namespace']}"


def _same(value: Any) -> Any:
    return value


def add_namespace_policy(
    app: web.Application,
    service: BrokerService,
    path: str,
    field: str,
    parse: Parse,
    *,
    show: Callable[[Any], Any] = _same,
    unset: Callable[[], Any] | None = None,
    writes: tuple[str, ...] = WRITES,
    removes: tuple[str, ...] | None = None,
    on_change: Callable[[str], None] | None = None,
) -> None:
    """GET, ``writes`` and DELETE at ``path`` for the namespace policy ``field`` (an attribute of
    its policies and a keyword of ``update_policy``). GET answers ``show(value)``, or ``unset()``
    (204 when None) while not set; DELETE unsets it at each path in ``removes`` (``path`` by
    default; none when empty); ``on_change`` runs with the namespace after each change."""

    def changed(name: str) -> None:
        if on_change is not None:
            on_change(name)

    @translate_errors
    async def get(request: web.Request) -> web.StreamResponse:
        value = getattr(service.namespaces.policies(namespace_of(request)), field)
        if value is not None:
            return web.json_response(show(value))
        return no_content() if unset is None else web.json_response(unset())

    @translate_errors
    async def write(request: web.Request) -> web.StreamResponse:
        name = namespace_of(request)
        service.namespaces.policies(name)  # 404 first
        value = parse(await json_body(request), request.match_info["tenant"])
        service.namespaces.update_policy(name, **{field: value})
        changed(name)
        return no_content()

    @translate_errors
    async def remove(request: web.Request) -> web.StreamResponse:
        name = namespace_of(request)
        service.namespaces.update_policy(name, **{field: None})
        changed(name)
        return no_content()

    app.router.add_get(path, get)
    for method in writes:
        app.router.add_route(method, path, write)
    for remove_path in (path,) if removes is None else removes:
        app.router.add_delete(remove_path, remove)


def add_topic_policy(
    app: web.Application,
    service: BrokerService,
    path: str,
    store: TopicPolicyStore,
    parse: Parse,
    applied: Callable[[TopicName], Any],
    *,
    show: Callable[[Any], Any] = _same,
    writes: tuple[str, ...] = WRITES,
    on_change: Callable[[TopicName], None] | None = None,
) -> None:
    """GET, ``writes`` and DELETE at ``path`` for a persistent topic's own policy kept in
    ``store``: GET answers ``show(own)`` (204 when not set), or with ``?applied=true`` the JSON
    ``applied(topic)`` gives; ``on_change`` runs with the topic after each change."""

    def topic(request: web.Request) -> TopicName:
        name = topic_of(request, "persistent")
        service.namespaces.policies(name.namespace_name)  # 404 for an unknown namespace
        return name

    def changed(name: TopicName) -> None:
        if on_change is not None:
            on_change(name)

    @translate_errors
    async def get(request: web.Request) -> web.StreamResponse:
        name = topic(request)
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(applied(name))
        own = store.get(name)
        return no_content() if own is None else web.json_response(show(own))

    @translate_errors
    async def write(request: web.Request) -> web.StreamResponse:
        name = topic(request)
        store.set(name, parse(await json_body(request), name.tenant))
        changed(name)
        return no_content()

    @translate_errors
    async def remove(request: web.Request) -> web.StreamResponse:
        name = topic(request)
        store.remove(name)
        changed(name)
        return no_content()

    app.router.add_get(path, get)
    for method in writes:
        app.router.add_route(method, path, write)
    app.router.add_delete(path, remove)
