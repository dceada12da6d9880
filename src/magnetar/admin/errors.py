"""What the admin handlers share: broker errors turned into HTTP answers the way Pulsar's admin
API does, and reading a request's topic and body."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

from aiohttp import web

from magnetar.broker.errors import BrokerError, SubscriptionNotFound, TopicNotFound
from magnetar.broker.namespaces import AlreadyExists, NotEmpty
from magnetar.broker.topic_name import InvalidTopicName, TopicName

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: type[web.HTTPException], message: str) -> web.HTTPException:
    # Pulsar answers {"reason": ...}; pulsar-admin shows the reason.
    return status(text=json.dumps({"reason": message}), content_type="application/json")


def translate_errors(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (TopicNotFound, SubscriptionNotFound) as exc:
            raise _error(web.HTTPNotFound, str(exc)) from None
        except (AlreadyExists, NotEmpty) as exc:
            raise _error(web.HTTPConflict, str(exc)) from None
        except (InvalidTopicName, ValueError, json.JSONDecodeError) as exc:
            raise _error(web.HTTPBadRequest, str(exc)) from None
        except BrokerError as exc:
            raise _error(web.HTTPPreconditionFailed, str(exc)) from None

    return wrapped


async def json_body(request: web.Request, default=None):
    text = await request.text()
    if not text.strip():
        if default is None:
            raise ValueError("request body is empty")
        return default
    return json.loads(text)


def no_content() -> web.Response:
    return web.Response(status=204)


def topic_of(request: web.Request, domain: str) -> TopicName:
    """The topic a ``.../{tenant}/{namespace}/{topic}/...`` path names in ``domain``."""
    m = request.match_info
    return TopicName.parse(f"{domain}://{m['tenant']}/{m['namespace']}/{m['topic']}")
