"""Requests one worker makes to another's own HTTP port on an admin request's behalf: the whole
request proxied to a topic's owner (owner_proxy.py), or one part of it, a partition or a bundle,
sent to its owner (partition_fanout.py, bundles_api.py).

Each part carries the original request's headers (its credentials: the owner checks them again)
and ``PROXIED_BY``, so that an owner that lost the bundle meanwhile answers 503 rather than
passing the request on again. A client certificate, which this worker's TLS handshake verified
and which cannot be presented again without its private key, goes as ``RELAYED_CERTIFICATE``:
its fields sealed with the workers' secret (broker/worker_credentials.py), which the owner's
authentication takes only with a valid seal.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from yarl import URL

from magnetar.admin.errors import reason_error
from magnetar.broker.worker_credentials import Relayed

if TYPE_CHECKING:
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

PROXIED_BY = "X-Magnetar-Proxied-By"
RELAYED_CERTIFICATE = "X-Magnetar-Relayed-Certificate"
#: Headers a proxy must not pass on (hop by hop, or recomputed for the new request).
_HOP_HEADERS = frozenset(
    h.lower()
    for h in (
        "Host",
        "Connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "Content-Length",
        "Upgrade",
        RELAYED_CERTIFICATE,  # only ever this worker's own seal
    )
)
TIMEOUT_S = 60.0


class OwnerAnswer(web.HTTPException):
    """An owner's refusal of a part, passed on to the client as the owner said it."""

    def __init__(self, status: int, body: bytes, content_type: str | None) -> None:
        self.status_code = status
        super().__init__(body=body, content_type=content_type)


class OwnerCalls:
    """One HTTP session (made at the first call) for the calls of one admin app to the owners."""

    def __init__(self, service: BrokerService) -> None:
        self._service = service
        self._session: aiohttp.ClientSession | None = None

    async def call(
        self,
        request: web.Request,
        owner: BrokerInfo,
        method: str,
        path: str,
        body: bytes | None = None,
        query: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, dict[str, str]]:
        """``method path`` (with ``request``'s query, or ``query``, and its headers) as ``owner``
        answers it: status, body, headers (503 raised if it cannot be reached: a worker restarting)."""
        base = owner.web_url or owner.web_url_tls
        if base is None:
            raise reason_error(web.HTTPServiceUnavailable, f"{owner.broker_id} serves no HTTP port")
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers[PROXIED_BY] = self._service.namespace_service.broker_id
        if (sealed := self._sealed_certificate(request)) is not None:
            headers[RELAYED_CERTIFICATE] = sealed
        url = URL(base).with_path(path).with_query(request.query if query is None else query)
        try:
            async with self._session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                ssl=False,  # the owner's own certificate on this machine; the client checked ours
            ) as answer:
                payload = await answer.read()
                kept = {k: v for k, v in answer.headers.items() if k.lower() not in _HOP_HEADERS}
                kept.pop("Content-Encoding", None)  # aiohttp decoded the body
                return answer.status, payload, kept
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("%s %s to %s failed: %s", method, path, owner.broker_id, exc)
            raise reason_error(
                web.HTTPServiceUnavailable, f"{owner.broker_id} cannot be reached: {exc}"
            ) from None

    def _sealed_certificate(self, request: web.Request) -> str | None:
        """The client's verified certificate, sealed for the owner; None without one."""
        secret = self._service.worker_secret
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        certificate = ssl_object.getpeercert() if ssl_object is not None else None
        if secret is None or not certificate:
            return None
        return secret.seal(Relayed("tls", certificate=certificate)).decode()

    async def close(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


OWNER_CALLS = web.AppKey("owner_calls", OwnerCalls)
