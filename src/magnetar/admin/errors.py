"""What the admin handlers share: broker errors turned into HTTP answers the way Pulsar's admin
API does, and reading a request's topic and body."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.errors import BrokerError, NotAllowed, SubscriptionNotFound, TopicNotFound
from magnetar.broker.namespace_service import ServiceUnitNotReady
from magnetar.broker.namespaces import AlreadyExists, NotEmpty
from magnetar.broker.offloads import OffloadConflict
from magnetar.broker.replication import ClusterNotAllowed
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.errors import OffloadedReadError

if TYPE_CHECKING:
    from magnetar.broker.nonpersistent import NonPersistentTopic
    from magnetar.broker.service import BrokerService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def reason_error(status: type[web.HTTPException], message: str) -> web.HTTPException:
    # Pulsar answers {"reason": ...}; pulsar-admin shows the reason.
    return status(text=json.dumps({"reason": message}), content_type="application/json")


def translate_errors(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (TopicNotFound, SubscriptionNotFound) as exc:
            raise reason_error(web.HTTPNotFound, str(exc)) from None
        except (AlreadyExists, NotEmpty) as exc:
            raise reason_error(web.HTTPConflict, str(exc)) from None
        except (InvalidTopicName, ValueError, json.JSONDecodeError) as exc:
            raise reason_error(web.HTTPBadRequest, str(exc)) from None
        except ClusterNotAllowed as exc:
            raise reason_error(web.HTTPForbidden, str(exc)) from None
        except ServiceUnitNotReady as exc:  # another worker owns the topic (its bundle moved)
            raise reason_error(web.HTTPServiceUnavailable, str(exc)) from None
        except OffloadedReadError as exc:  # the object store holding an offloaded ledger fails
            raise reason_error(web.HTTPServiceUnavailable, str(exc)) from None
        except OffloadConflict as exc:
            raise reason_error(web.HTTPConflict, str(exc)) from None
        except BrokerError as exc:
            raise reason_error(web.HTTPPreconditionFailed, str(exc)) from None

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


def single_topic(
    service: BrokerService, request: web.Request, domain: str, advice: str
) -> PersistentTopic | NonPersistentTopic:
    """The one topic (or partition) a path names, loaded if stored (404 if none); a partitioned
    topic's own name is refused (412) with ``advice`` on what to ask instead."""
    name = topic_of(request, domain)
    if service.namespaces.partitions(str(name)):
        raise NotAllowed(f"{name} is a partitioned topic: {advice}")
    return service.get_topic(name, create=False)


def persistent(topic: PersistentTopic | NonPersistentTopic) -> PersistentTopic:
    """``topic`` as the persistent topic a ``persistent://`` path names (412 for any other)."""
    if not isinstance(topic, PersistentTopic):
        raise NotAllowed(f"{topic.name} is not a persistent topic")
    return topic


def partitions_of(service: BrokerService, request: web.Request, domain: str) -> list[TopicName]:
    """The partitions of the partitioned topic a path names (412 if it is not one)."""
    name = topic_of(request, domain)
    service.check_namespace(name)
    count = service.namespaces.partitions(str(name))
    if not count:
        raise NotAllowed(f"{name} is not a partitioned topic")
    return [name.partition(i) for i in range(count)]
