"""Pulsar's admin v2 schema paths: ``/admin/v2/schemas/{tenant}/{namespace}/{topic}/...``.

| path | method | answer |
|---|---|---|
| ``.../schema`` | GET | the latest schema ``{"version", "type", "timestamp", "data", "properties"}`` |
| ``.../schema/{version}`` | GET | that version |
| ``.../schemas`` | GET | ``{"getSchemaResponses": [...]}``: every version since the last delete |
| ``.../schema`` | POST | upload ``{"type", "schema", "properties"}``: ``{"version": N}`` |
| ``.../schema`` | DELETE | delete the schema: ``{"version": N}`` (the delete's version) |
| ``.../compatibility`` | POST | ``{"compatibility": bool, "schemaCompatibilityStrategy": "..."}`` |
| ``.../version`` | POST | the version of an identical schema: ``{"version": N}`` |

As in Pulsar, ``data`` is the schema data as a UTF-8 string; an incompatible upload answers
409, unparsable schema data 422, no schema 404 (``{"reason": ...}`` each).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.errors import json_body, translate_errors
from magnetar.broker.schemas.compatibility import SchemaData
from magnetar.broker.schemas.registry import (
    TYPE_NAMES,
    IncompatibleSchemaError,
    InvalidSchemaDataError,
    StoredSchema,
)
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


def schema_json(stored: StoredSchema) -> dict:
    return {
        "version": stored.version,
        "type": stored.type,
        "timestamp": stored.timestamp,
        "data": stored.data.decode("utf-8", errors="replace"),
        "properties": stored.properties,
    }


def _reason(status: type[web.HTTPException], message: str) -> web.HTTPException:
    return status(text=json.dumps({"reason": message}), content_type="application/json")


BASE = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"


def add_routes(app: web.Application, service: BrokerService) -> None:
    _read_routes(app, service)
    _write_routes(app, service)


def _topic(service: BrokerService, request: web.Request) -> TopicName:
    m = request.match_info
    name = TopicName.parse(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
    service.namespaces.policies(name.namespace_name)  # 404 for an unknown namespace
    return name


async def _payload(request: web.Request) -> SchemaData:
    body = await json_body(request)
    if not isinstance(body, dict):
        raise ValueError('the body must be {"type": ..., "schema": ..., "properties": {...}}')
    kind = body.get("type")
    if kind not in TYPE_NAMES:
        raise ValueError(f"unknown schema type {kind!r}; one of {', '.join(sorted(TYPE_NAMES))}")
    if kind == "KEY_VALUE":
        raise ValueError("KEY_VALUE schemas are registered by clients, not over HTTP")
    data = body.get("schema") or ""
    properties = body.get("properties") or {}
    if not isinstance(data, str) or not isinstance(properties, dict):
        raise ValueError("'schema' must be a string and 'properties' an object")
    return SchemaData(kind, data.encode(), {str(k): str(v) for k, v in properties.items()})


def _read_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def get_latest(request):
        name = _topic(service, request)
        stored = service.schemas.get(name)
        if stored is None:
            deleted = bool(service.schemas.history(name))
            raise _reason(web.HTTPNotFound, "Schema is deleted" if deleted else "Schema not found")
        return web.json_response(schema_json(stored))

    @translate_errors
    async def get_version(request):
        name = _topic(service, request)
        try:
            version = int(request.match_info["version"])
        except ValueError:
            raise ValueError("the version must be a number") from None
        stored = service.schemas.get(name, version)
        if stored is None:
            raise _reason(web.HTTPNotFound, f"Schema version {version} not found")
        return web.json_response(schema_json(stored))

    @translate_errors
    async def get_all(request):
        live = service.schemas.live(_topic(service, request))
        return web.json_response({"getSchemaResponses": [schema_json(s) for s in live]})

    app.router.add_get(f"{BASE}/schema", get_latest)
    app.router.add_get(f"{BASE}/schema/{{version}}", get_version)
    app.router.add_get(f"{BASE}/schemas", get_all)


def _write_routes(app: web.Application, service: BrokerService) -> None:
    @translate_errors
    async def post_schema(request):
        name = _topic(service, request)
        schema = await _payload(request)
        try:
            version = service.schemas.add(name, schema)
        except InvalidSchemaDataError as exc:
            raise _reason(web.HTTPUnprocessableEntity, str(exc)) from None
        except IncompatibleSchemaError as exc:
            raise _reason(web.HTTPConflict, str(exc)) from None
        return web.json_response({"version": version})

    @translate_errors
    async def delete_schema(request):
        version = service.schemas.delete(_topic(service, request))
        if version is None:
            raise _reason(web.HTTPNotFound, "Schema not found")
        return web.json_response({"version": version})

    @translate_errors
    async def test_compatibility(request):
        name = _topic(service, request)
        schema = await _payload(request)
        strategy = service.schemas.strategy(name)
        try:
            if service.schemas.find_version(name, schema) is None:
                service.schemas.check(name, schema)
            compatible = True
        except InvalidSchemaDataError as exc:
            raise _reason(web.HTTPUnprocessableEntity, str(exc)) from None
        except IncompatibleSchemaError:
            compatible = False
        return web.json_response({"compatibility": compatible, "schemaCompatibilityStrategy": strategy})

    @translate_errors
    async def version_of(request):
        name = _topic(service, request)
        version = service.schemas.find_version(name, await _payload(request))
        if version is None:
            raise _reason(web.HTTPNotFound, "No such schema version")
        return web.json_response({"version": version})

    app.router.add_post(f"{BASE}/schema", post_schema)
    app.router.add_delete(f"{BASE}/schema", delete_schema)
    app.router.add_post(f"{BASE}/compatibility", test_compatibility)
    app.router.add_post(f"{BASE}/version", version_of)
