"""What the WebSocket endpoints share: their settings, the upgrade, one writer per session, a close
with Pulsar's error, and query parameters read as Pulsar's handlers read them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.websocket.http_session import refusal
from magnetar.websocket.json_shapes import WebSocketError

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig

log = logging.getLogger(__name__)

#: JSON and base64 around a payload: room for a message of ``max_message_size`` in one text frame.
_JSON_ROOM = 64 * 1024
#: A close frame's reason holds at most 123 bytes (RFC 6455).
_MAX_REASON = 123


def max_text_frame_size(config: BrokerConfig) -> int:
    """``web_socket_max_text_frame_size``, or room for a message of ``max_message_size`` in base64."""
    configured = config.web_socket_max_text_frame_size
    if configured is not None:
        return configured
    return (config.max_message_size + 2) // 3 * 4 + _JSON_ROOM


async def upgrade(request: web.Request, config: BrokerConfig) -> web.WebSocketResponse:
    """The WebSocket, pinged every ``keepalive_interval_seconds`` as the binary port's connections
    are: a client that stops answering (a half-open TCP connection) is closed, its session with it."""
    heartbeat = config.keepalive_interval_seconds or None
    ws = web.WebSocketResponse(max_msg_size=max_text_frame_size(config), autoping=True, heartbeat=heartbeat)
    await ws.prepare(request)
    return ws


class Outbox:
    """Texts for one WebSocket, written in order by one task, so that answers finishing on the
    loop need not wait for the socket (a frame is written whole, whoever writes it)."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def put(self, text: str) -> None:
        self._queue.put_nowait(text)

    async def drain(self) -> None:
        """Wait until everything queued is written (or the socket is gone)."""
        if not self._task.done():
            await self._queue.join()

    async def _run(self) -> None:
        try:
            while True:
                text = await self._queue.get()
                try:
                    await self.ws.send_str(text)
                finally:
                    self._queue.task_done()
        except (ConnectionError, RuntimeError):  # the peer went away: nothing more is written
            while not self._queue.empty():
                self._queue.get_nowait()
                self._queue.task_done()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def close_with(ws: web.WebSocketResponse, error: WebSocketError, detail: str = "") -> None:
    """Close with Pulsar's error (close code 4000 + its number) and a reason saying why."""
    reason = error.description + (f": {detail}" if detail else "")
    data = reason.encode()[:_MAX_REASON]
    while True:  # cut on a character boundary
        try:
            data.decode()
            break
        except UnicodeDecodeError:
            data = data[:-1]
    log.info("closing a WebSocket session: %d %s", error.close_code, reason)
    with contextlib.suppress(ConnectionError, RuntimeError):
        await ws.close(code=error.close_code, message=data)


class QueryParams:
    """The request's query parameters, read as Pulsar's handlers read them: a value that does not
    parse is a 400 "Invalid query params: ..." before the upgrade."""

    def __init__(self, request: web.Request) -> None:
        self._query = request.query

    def text(self, name: str) -> str | None:
        value = self._query.get(name)
        return value if value else None

    def integer(self, name: str, default: int, minimum: int = 0) -> int:
        value = self._query.get(name)
        if value is None or value == "":
            return default
        try:
            number = int(value)
        except ValueError:
            raise invalid(f"{name} must be an integer, not {value!r}") from None
        if number < minimum:
            raise invalid(f"{name} must be at least {minimum}, not {number}")
        return number

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self._query.get(name)
        if value is None or value == "":
            return default
        return value.strip().lower() == "true"  # Java's Boolean.parseBoolean

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self._query.get(name)
        if value is None or value == "":
            return default
        if value not in choices:
            raise invalid(f"Invalid {name} {value}: one of {', '.join(choices)}")
        return value


def invalid(message: str) -> web.HTTPException:
    return refusal(400, f"Invalid query params: {message}")
