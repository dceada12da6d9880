"""Admin v2 paths for the continuous message index (PIP 70), both ways.

``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/messageid/{index}``
    -> ``{"ledgerId", "entryId", "batchIndex", "partition", "index"}``
``GET /admin/v2/persistent/{tenant}/{namespace}/{topic}/index?ledgerId=&entryId=&batchIndex=``
    -> ``{"index"}``

Errors answer ``{"reason": ...}`` as Pulsar's admin API does: 400 for a bad argument or a
partitioned topic's base name, 404 for an unknown topic or an index or message id not
stored, 409 when the index interceptor is off (or the entry was stored without an index).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import persistent, translate_errors
from magnetar.broker.index_lookup import (
    IndexLookupError,
    index_for_message_id,
    message_id_for_index,
    message_id_json,
)
from magnetar.broker.offloaded_reads import PatientReader, answered
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.position import Position

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import PersistentTopic

_STATUS = {400: web.HTTPBadRequest, 404: web.HTTPNotFound, 409: web.HTTPConflict}


def _reason(status: int, message: str) -> web.HTTPException:
    return _STATUS.get(status, web.HTTPBadRequest)(
        text=json.dumps({"reason": message}), content_type="application/json"
    )


def _int_arg(value: str | None, name: str, default: int | None = None) -> int:
    if value is None or value == "":
        if default is None:
            raise _reason(400, f"{name} is required")
        return default
    try:
        return int(value)
    except ValueError:
        raise _reason(400, f"{name} must be an integer, not {value!r}") from None


def add_routes(app: web.Application, service: BrokerService) -> None:
    def topic_of(request: web.Request) -> PersistentTopic:
        m = request.match_info
        name = TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        if name.partition_index < 0 and service.namespaces.partitions(str(name)):
            raise _reason(400, f"{name} is a partitioned topic: ask its partitions ({name}-partition-N)")
        return persistent(service.get_topic(name, create=False))  # TopicNotFound -> 404

    @translate_errors
    async def message_id(request: web.Request) -> web.Response:
        index = _int_arg(request.match_info["index"], "index")
        topic = topic_of(request)
        reader = PatientReader(topic.ml)
        try:
            found = await answered(
                topic.ml, lambda: message_id_for_index(topic, index, reader), f"looking up index {index}"
            )
        except IndexLookupError as exc:
            raise _reason(exc.status, str(exc)) from None
        return web.json_response(message_id_json(topic, found))

    @translate_errors
    async def index(request: web.Request) -> web.Response:
        q = request.query
        position = Position(_int_arg(q.get("ledgerId"), "ledgerId"), _int_arg(q.get("entryId"), "entryId"))
        batch_index = _int_arg(q.get("batchIndex"), "batchIndex", default=-1)
        topic = topic_of(request)
        reader = PatientReader(topic.ml)
        try:
            value = await answered(
                topic.ml,
                lambda: index_for_message_id(topic, position, batch_index, reader),
                f"looking up the index of {position}",
            )
        except IndexLookupError as exc:
            raise _reason(exc.status, str(exc)) from None
        return web.json_response({"index": value})

    base = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    app.router.add_get(f"{base}/messageid/{{index}}", message_id)
    app.router.add_get(f"{base}/index", index)
