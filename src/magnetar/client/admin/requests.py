"""What the typed admin resources (tenants, namespaces, clusters, schemas, topics) use of the
``AdminClient`` that made them: its HTTP calls and the topic permission calls."""

from __future__ import annotations

from typing import Any, Protocol


class AdminRequests(Protocol):
    def request(
        self, method: str, path: str, body: Any = None, params: dict[str, Any] | None = None
    ) -> Any: ...

    def request_bytes(
        self, method: str, path: str, params: dict[str, Any] | None = None
    ) -> tuple[bytes, dict[str, str]]: ...

    def get_permissions(self, topic: str) -> dict[str, list[str]]: ...

    def grant_permission(self, topic: str, role: str, actions: list[str]) -> None: ...

    def revoke_permissions(self, topic: str, role: str) -> None: ...
