"""What the WebSocket and REST handlers share: the HTTP client's credentials, its topic, the
sessions opened for it, and the broker's refusals as HTTP answers (Pulsar's ``getErrorCode``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.protocol import wire
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.websocket.session import Credentials, SessionError
from magnetar.websocket.sessions import Sessions

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

#: The WebSocket API's query parameter for a token (browsers cannot set a header on a WebSocket).
TOKEN_PARAMETER = "token"

#: A broker refusal's HTTP status, as Pulsar's WebSocket handlers choose it (500 otherwise).
_STATUS = {
    wire.AuthenticationError: 401,
    wire.AuthorizationError: 403,
    wire.TopicNotFound: 404,
    wire.SubscriptionNotFound: 404,
    wire.ProducerBusy: 409,
    wire.ConsumerBusy: 409,
    wire.ProducerFenced: 409,
    wire.IncompatibleSchema: 409,
    wire.TooManyRequests: 429,
    wire.ProducerBlockedQuotaExceededError: 503,
    wire.ProducerBlockedQuotaExceededException: 503,
    wire.TopicTerminatedError: 503,
    wire.ServiceNotReady: 503,
    wire.InvalidTopicName: 400,
    wire.NotAllowedError: 400,
}


def bearer_token(request: web.Request, query: bool) -> str | None:
    """The token of ``Authorization: Bearer <token>``, else (``query``: the WebSocket API) of the
    ``token`` query parameter, as Pulsar's ``WebSocketHttpServletRequestWrapper`` reads it."""
    header = request.headers.get("Authorization")
    if header:
        scheme, _, token = header.strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None
    if query and (value := request.query.get(TOKEN_PARAMETER)):
        return value.strip()
    return None


def transport_info(request: web.Request) -> dict[str, Any]:
    """What the in-process connection tells the broker of its peer: the HTTP client's address,
    and over HTTPS the TLS context and the client's certificate."""
    transport = request.transport
    info: dict[str, Any] = {}
    if transport is None:
        return info
    for name in ("peername", "sslcontext", "peercert"):
        value = transport.get_extra_info(name)
        if value is not None:
            info[name] = value
    return info


def sessions_for(service: BrokerService, request: web.Request, query_token: bool) -> Sessions:
    """The sessions (one per worker owning a topic it uses) with the HTTP client's credentials."""
    info = transport_info(request)
    certificate = info.get("peercert") or None
    credentials = Credentials(bearer_token(request, query_token), "peercert" in info, certificate)
    return Sessions(service, credentials, info)


def topic_of(request: web.Request, domain: str) -> TopicName:
    """The topic a ``.../{tenant}/{namespace}/{topic}`` path names (400 if it names none)."""
    m = request.match_info
    try:
        return TopicName.parse(f"{domain}://{m['tenant']}/{m['namespace']}/{m['topic']}")
    except InvalidTopicName as exc:
        raise refusal(400, f"Invalid topic name: {exc}") from None


def partitions_of(service: BrokerService, topic: TopicName) -> list[TopicName]:
    """The partitions of a partitioned topic, else the topic itself."""
    count = service.namespaces.partitions(str(topic))
    return [topic.partition(i) for i in range(count)] if count else [topic]


_ERRORS: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest,
    401: web.HTTPUnauthorized,
    403: web.HTTPForbidden,
    404: web.HTTPNotFound,
    409: web.HTTPConflict,
    429: web.HTTPTooManyRequests,
    500: web.HTTPInternalServerError,
    503: web.HTTPServiceUnavailable,
}


def refusal(status: int, reason: str) -> web.HTTPException:
    """An HTTP error with Pulsar's JSON body ``{"reason": ...}``."""
    text, kind = json.dumps({"reason": reason}), "application/json"
    if status == 413:
        return web.HTTPRequestEntityTooLarge(max_size=0, actual_size=0, text=text, content_type=kind)
    return _ERRORS[status](text=text, content_type=kind)


def refused(exc: SessionError, what: str) -> web.HTTPException:
    """The broker's refusal of ``what`` (e.g. "create producer") as Pulsar's WebSocket API answers it."""
    return refusal(_STATUS.get(wire.ServerError.ValueType(exc.code), 500), f"Failed to {what}: {exc}")
