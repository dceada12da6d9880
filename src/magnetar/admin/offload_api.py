"""Pulsar's tiered-storage paths (docs/tiered-storage.md):

- ``PUT .../persistent/{t}/{ns}/{topic}/offload`` with a message id (Pulsar's MessageIdImpl JSON:
  ``ledgerId``, ``entryId``, ``partitionIndex``) offloads every closed ledger before that message's
  ledger (204; 409 while a run is under way); ``GET`` the same path answers the last run's status
  as Pulsar's OffloadProcessStatus (``status``, ``lastError``, ``firstUnoffloadedMessage``).
- A namespace's ``offloadThreshold`` and ``offloadThresholdInSeconds`` (GET, PUT a number; -1
  when not set), ``offloadDeletionLagMs`` (GET, PUT,
  DELETE) and ``offloadPolicies`` (GET, POST, DELETE; also ``DELETE .../removeOffloadPolicies``).
- A topic's ``offloadPolicies`` (GET, with ``?applied=true`` what applies; POST; DELETE).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, persistent, single_topic, topic_of, translate_errors
from magnetar.broker import offload_policies
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"


def _whole_number(value: object, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be a whole number of at least {minimum}")
    return value


def add_routes(app: web.Application, service: BrokerService) -> None:
    def ns(request: web.Request) -> str:
        return f"{request.match_info['tenant']}/{request.match_info['namespace']}"

    def driver() -> str | None:
        return service.config.managed_ledger_offload_driver

    # -- a topic's offload ----------------------------------------------------------------------------
    @translate_errors
    async def trigger(request):
        topic = persistent(single_topic(service, request, "persistent", "offload each partition"))
        body = await json_body(request)
        if not isinstance(body, dict) or "ledgerId" not in body:
            raise ValueError('the body must be a message id: {"ledgerId": ..., "entryId": ...}')
        ledger_id = _whole_number(body["ledgerId"], "ledgerId", -1)
        entry_id = body.get("entryId", 0)
        service.offloads.trigger(topic, Position(ledger_id, entry_id if isinstance(entry_id, int) else 0))
        return no_content()

    @translate_errors
    async def status(request):
        topic = persistent(single_topic(service, request, "persistent", "ask each partition"))
        return web.json_response(service.offloads.status(topic, topic.name.partition_index))

    app.router.add_put(f"{TOPIC}/offload", trigger)
    app.router.add_get(f"{TOPIC}/offload", status)

    # -- a namespace's policies -----------------------------------------------------------------------
    @translate_errors
    async def get_threshold(request):
        threshold = service.namespaces.policies(ns(request)).offload_threshold
        return web.json_response(-1 if threshold is None else threshold)

    @translate_errors
    async def set_threshold(request):
        name = ns(request)
        service.namespaces.policies(name)
        value = _whole_number(await json_body(request), "offloadThreshold", -1)
        service.namespaces.update_policy(name, offload_threshold=value)
        return no_content()

    @translate_errors
    async def get_threshold_seconds(request):
        threshold = service.namespaces.policies(ns(request)).offload_threshold_in_seconds
        return web.json_response(-1 if threshold is None else threshold)

    @translate_errors
    async def set_threshold_seconds(request):
        name = ns(request)
        service.namespaces.policies(name)
        value = _whole_number(await json_body(request), "offloadThresholdInSeconds", -1)
        service.namespaces.update_policy(name, offload_threshold_in_seconds=value)
        return no_content()

    @translate_errors
    async def get_lag(request):
        return web.json_response(service.namespaces.policies(ns(request)).offload_deletion_lag_ms)

    @translate_errors
    async def set_lag(request):
        name = ns(request)
        service.namespaces.policies(name)
        value = _whole_number(await json_body(request), "offloadDeletionLagMs", 0)
        service.namespaces.update_policy(name, offload_deletion_lag_ms=value)
        return no_content()

    @translate_errors
    async def clear_lag(request):
        service.namespaces.update_policy(ns(request), offload_deletion_lag_ms=None)
        return no_content()

    @translate_errors
    async def get_ns_policies(request):
        policies = service.namespaces.policies(ns(request)).offload_policies
        return no_content() if policies is None else web.json_response(offload_policies.shown(policies))

    @translate_errors
    async def set_ns_policies(request):
        name = ns(request)
        service.namespaces.policies(name)
        policies = offload_policies.checked(await json_body(request), driver())
        service.namespaces.update_policy(name, offload_policies=policies)
        return no_content()

    @translate_errors
    async def remove_ns_policies(request):
        service.namespaces.update_policy(ns(request), offload_policies=None)
        return no_content()

    app.router.add_get(f"{NAMESPACE}/offloadThreshold", get_threshold)
    app.router.add_put(f"{NAMESPACE}/offloadThreshold", set_threshold)
    app.router.add_get(f"{NAMESPACE}/offloadThresholdInSeconds", get_threshold_seconds)
    app.router.add_put(f"{NAMESPACE}/offloadThresholdInSeconds", set_threshold_seconds)
    app.router.add_get(f"{NAMESPACE}/offloadDeletionLagMs", get_lag)
    app.router.add_put(f"{NAMESPACE}/offloadDeletionLagMs", set_lag)
    app.router.add_delete(f"{NAMESPACE}/offloadDeletionLagMs", clear_lag)
    app.router.add_get(f"{NAMESPACE}/offloadPolicies", get_ns_policies)
    app.router.add_post(f"{NAMESPACE}/offloadPolicies", set_ns_policies)
    app.router.add_put(f"{NAMESPACE}/offloadPolicies", set_ns_policies)
    app.router.add_delete(f"{NAMESPACE}/offloadPolicies", remove_ns_policies)
    app.router.add_delete(f"{NAMESPACE}/removeOffloadPolicies", remove_ns_policies)

    # -- a topic's policies ---------------------------------------------------------------------------
    @translate_errors
    async def get_topic_policies(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(service.offload_policies(topic).to_json())
        own = service.resources.topic_offload_policies.get(topic)
        return no_content() if own is None else web.json_response(offload_policies.shown(own))

    @translate_errors
    async def set_topic_policies(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        policies = offload_policies.checked(await json_body(request), driver())
        service.resources.topic_offload_policies.set(topic, policies)
        return no_content()

    @translate_errors
    async def remove_topic_policies(request):
        topic = topic_of(request, "persistent")
        service.namespaces.policies(topic.namespace_name)
        service.resources.topic_offload_policies.remove(topic)
        return no_content()

    app.router.add_get(f"{TOPIC}/offloadPolicies", get_topic_policies)
    app.router.add_post(f"{TOPIC}/offloadPolicies", set_topic_policies)
    app.router.add_put(f"{TOPIC}/offloadPolicies", set_topic_policies)
    app.router.add_delete(f"{TOPIC}/offloadPolicies", remove_topic_policies)
