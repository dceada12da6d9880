"""A WebSocket session for a topic another worker owns, relayed to that worker (``--workers``).

The admin port proxies a request about another worker's topic to its owner (owner_proxy.py); a
WebSocket session is relayed the same way: this worker opens the same path on the owner's own
HTTP port, with the client's credentials (the owner checks them again) and ``PROXIED_BY``, and
passes frames both ways until either side closes, with that side's close code. The owner's
refusal of the upgrade (401, 403, 404 ...) is the client's answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from yarl import URL

from magnetar.admin.owner_calls import PROXIED_BY

if TYPE_CHECKING:
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService

log = logging.getLogger(__name__)

_PASSED_HEADERS = ("Authorization",)


def is_websocket(request: web.Request) -> bool:
    return request.headers.get("Upgrade", "").lower() == "websocket"


async def relay(request: web.Request, service: BrokerService, owner: BrokerInfo) -> web.StreamResponse:
    base = owner.web_url or owner.web_url_tls
    if base is None:
        return _refusal(503, f"{owner.broker_id} serves no HTTP port")
    url = URL(base.replace("http", "ws", 1)).with_path(request.path).with_query(request.query)
    headers = {name: request.headers[name] for name in _PASSED_HEADERS if name in request.headers}
    headers[PROXIED_BY] = service.namespace_service.broker_id
    async with aiohttp.ClientSession() as session:
        try:
            upstream = await session.ws_connect(url, headers=headers, ssl=False, max_msg_size=0)
        except aiohttp.WSServerHandshakeError as exc:
            return _refusal(exc.status, exc.message or f"{owner.broker_id} refused the session")
        except (aiohttp.ClientError, TimeoutError) as exc:
            return _refusal(503, f"{owner.broker_id} cannot be reached: {exc}")
        async with upstream:
            client = web.WebSocketResponse(max_msg_size=0)
            await client.prepare(request)
            log.info("%s: WebSocket %s relayed to %s", request.remote, request.path, owner.broker_id)
            await _pump_both(client, upstream)
        return client


async def _pump_both(client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    to_owner = asyncio.ensure_future(_pump(client, upstream))
    to_client = asyncio.ensure_future(_pump(upstream, client))
    done, pending = await asyncio.wait({to_owner, to_client}, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finished = done.pop()
    source, target = (client, upstream) if finished is to_owner else (upstream, client)
    code = source.close_code or aiohttp.WSCloseCode.OK
    reason = getattr(source, "_close_message", b"") or b""
    with contextlib.suppress(ConnectionError, RuntimeError):
        await target.close(code=code, message=reason if isinstance(reason, bytes) else str(reason).encode())


async def _pump(source, target) -> None:
    async for message in source:
        if message.type == aiohttp.WSMsgType.TEXT:
            await target.send_str(message.data)
        elif message.type == aiohttp.WSMsgType.BINARY:
            await target.send_bytes(message.data)
        else:
            break


def _refusal(status: int, reason: str) -> web.Response:
    return web.Response(status=status, text=json.dumps({"reason": reason}), content_type="application/json")
