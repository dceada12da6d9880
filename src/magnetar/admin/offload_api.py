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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.admin.errors import json_body, no_content, persistent, single_topic, translate_errors
from magnetar.admin.policy_routes import add_namespace_policy, add_topic_policy
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


def _number(name: str, minimum: int) -> Callable[[object, str], int]:
    return lambda body, _tenant: _whole_number(body, name, minimum)


def add_routes(app: web.Application, service: BrokerService) -> None:
    def checked(body: object, _tenant: str) -> dict[str, Any]:
        return offload_policies.checked(body, service.config.managed_ledger_offload_driver)

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

    # -- a namespace's policies (the thresholds answer -1 when not set) -------------------------------
    for path, field in (
        ("offloadThreshold", "offload_threshold"),
        ("offloadThresholdInSeconds", "offload_threshold_in_seconds"),
    ):
        add_namespace_policy(
            app,
            service,
            f"{NAMESPACE}/{path}",
            field,
            _number(path, -1),
            unset=lambda: -1,
            writes=("PUT",),
            removes=(),
        )
    add_namespace_policy(
        app,
        service,
        f"{NAMESPACE}/offloadDeletionLagMs",
        "offload_deletion_lag_ms",
        _number("offloadDeletionLagMs", 0),
        unset=lambda: None,
        writes=("PUT",),
    )
    add_namespace_policy(
        app,
        service,
        f"{NAMESPACE}/offloadPolicies",
        "offload_policies",
        checked,
        show=offload_policies.shown,
        removes=(f"{NAMESPACE}/offloadPolicies", f"{NAMESPACE}/removeOffloadPolicies"),
    )

    # -- a topic's policies ---------------------------------------------------------------------------
    add_topic_policy(
        app,
        service,
        f"{TOPIC}/offloadPolicies",
        service.resources.topic_offload_policies,
        checked,
        lambda topic: service.offload_policies(topic).to_json(),
        show=offload_policies.shown,
    )
