"""Authentication of admin HTTP requests: ``Authorization: Bearer <token>``, checked by the
broker's providers (broker/authentication.py), as Pulsar's ``AuthenticationFilter``.

The proved role is left on the request as ``request[ROLE]`` for the handlers (authorization).
Refusals are 401 with Pulsar's JSON body ``{"reason": ...}``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable

from aiohttp import web

from magnetar.admin.owner_calls import RELAYED_CERTIFICATE
from magnetar.broker.authentication import Authentication, AuthenticationFailed
from magnetar.broker.worker_credentials import WorkerSecret
from magnetar.websocket.http_session import TOKEN_PARAMETER

log = logging.getLogger(__name__)

#: Where a request's authenticated role is kept (None while authentication is off).
ROLE: web.RequestKey[str | None] = web.RequestKey("magnetar.role")
#: The WebSocket API's paths, whose requests may carry their token as a query parameter.
WEBSOCKET_PREFIX = "/ws/"
#: Paths left open when ``authenticate_metrics_endpoint`` is false (Prometheus, health probes).
SCRAPE_PATHS = frozenset({"/metrics", "/metrics/", "/admin/v2/brokers/health"})
#: The web console's own files (console_api.py): a page with no data in it, open so that a browser
#: can load its login form; every figure it then shows comes with the token it logs in with.
CONSOLE_PAGE = "/console"


def is_console_page(path: str) -> bool:
    return path == CONSOLE_PAGE or path.startswith(CONSOLE_PAGE + "/")


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def middleware(
    authentication: Authentication | None,
    authenticate_metrics: bool,
    successes: Counter[str] | None = None,
    failures: Counter[str] | None = None,
    worker_secret: WorkerSecret | None = None,
):
    """``successes`` / ``failures``: counted by auth method (``token`` for a Bearer header, else
    ``other``), the broker's /metrics counters. ``worker_secret``: with workers, a request another
    worker proxied here carries its client's certificate sealed (owner_calls.py)."""
    successes = Counter() if successes is None else successes
    failures = Counter() if failures is None else failures

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[ROLE] = None
        if authentication is None or (not authenticate_metrics and request.path in SCRAPE_PATHS):
            return await handler(request)
        if is_console_page(request.path):
            return await handler(request)
        peer_certificate = None
        if (
            ssl_object := request.transport.get_extra_info("ssl_object") if request.transport else None
        ) is not None:
            peer_certificate = ssl_object.getpeercert()
        header = request.headers.get("Authorization")
        if (relayed := request.headers.get(RELAYED_CERTIFICATE)) is not None:
            try:
                peer_certificate = relayed_certificate(worker_secret, relayed)
            except AuthenticationFailed as exc:
                failures["other"] += 1
                return refused(request, exc)
        if header is None and request.path.startswith(WEBSOCKET_PREFIX):
            # Browsers cannot set headers on a WebSocket: Pulsar's WebSocket API takes ?token=.
            token = request.query.get(TOKEN_PARAMETER)
            header = f"Bearer {token}" if token else None
        method = "token" if header and header.strip().lower().startswith("bearer") else "other"
        try:
            request[ROLE] = authentication.authenticate_http(header, peer_certificate)
        except AuthenticationFailed as exc:
            failures[method] += 1
            return refused(request, exc)
        successes[method] += 1
        return await handler(request)

    return authenticate


def relayed_certificate(secret: WorkerSecret | None, sealed: str) -> object:
    """The certificate fields another worker sealed; AuthenticationFailed if the seal is not the
    workers' (a client cannot name a certificate it does not hold)."""
    if secret is None:
        raise AuthenticationFailed("a relayed certificate reached a broker without workers")
    relayed = secret.open(sealed.encode())
    if relayed.method != "tls" or not relayed.certificate:
        raise AuthenticationFailed("the relayed credentials are not a certificate")
    return relayed.certificate


def refused(request: web.Request, exc: AuthenticationFailed) -> web.Response:
    log.info("%s %s from %s: 401: %s", request.method, request.path, request.remote, exc)
    return web.json_response(
        {"reason": str(exc)},
        status=401,
        headers={"WWW-Authenticate": 'Bearer realm="magnetar"'},
    )
