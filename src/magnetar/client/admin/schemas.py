"""A topic's schemas through the admin API (``admin.schemas``, Pulsar's ``/admin/v2/schemas``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.client.admin.paths import quote
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.client.admin.requests import AdminRequests


def schema_path(topic: str) -> str:
    """``/admin/v2/schemas/{tenant}/{namespace}/{topic}`` (schemas are of persistent topics)."""
    name = TopicName.parse(topic)
    return "/admin/v2/schemas/" + "/".join(quote(p) for p in (name.tenant, name.namespace, name.local_name))


def schema_payload(
    schema_type: str, schema: str = "", properties: dict[str, str] | None = None
) -> dict[str, Any]:
    """What an upload sends: Pulsar's PostSchemaPayload (``schema`` is the definition as text)."""
    return {"type": schema_type, "schema": schema, "properties": dict(properties or {})}


class Schemas:
    """Read, upload, delete and test a topic's schema. A schema answer is
    ``{"version", "type", "timestamp", "data", "properties"}``."""

    def __init__(self, admin: AdminRequests) -> None:
        self._admin = admin

    def get(self, topic: str, version: int | None = None) -> dict[str, Any]:
        """The latest schema, or ``version`` (``NotFoundError`` if there is none)."""
        tail = "/schema" if version is None else f"/schema/{int(version)}"
        return self._admin.request("GET", schema_path(topic) + tail)

    def get_all(self, topic: str) -> list[dict[str, Any]]:
        """Every version since the last delete, oldest first."""
        body = self._admin.request("GET", schema_path(topic) + "/schemas") or {}
        return list(body.get("getSchemaResponses", []))

    def upload(self, topic: str, payload: dict[str, Any]) -> int:
        """Register ``payload`` (``schema_payload()``); its version. ``ConflictError`` if incompatible."""
        return int(self._admin.request("POST", schema_path(topic) + "/schema", payload)["version"])

    def delete(self, topic: str) -> int:
        """Delete the topic's schema; the delete's version."""
        return int(self._admin.request("DELETE", schema_path(topic) + "/schema")["version"])

    def test_compatibility(self, topic: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``{"compatibility": bool, "schemaCompatibilityStrategy": "..."}`` of ``payload``."""
        return self._admin.request("POST", schema_path(topic) + "/compatibility", payload)

    def version_of(self, topic: str, payload: dict[str, Any]) -> int:
        """The version of a schema identical to ``payload`` (``NotFoundError`` if none)."""
        return int(self._admin.request("POST", schema_path(topic) + "/version", payload)["version"])
