"""The Pulsar sessions one HTTP client's WebSocket session or REST request uses.

Alone, a broker serves every topic: one in-process session. With ``--workers``, a topic's bundle
is owned by one worker, which may not be the one that got the request: the topics (a
partitioned topic's partitions) this worker owns get the in-process session, and those another
worker owns a session to that worker's own Pulsar port (``LocalSession.to_owner``), one per
worker, opened when first needed, as Pulsar's WebSocket service connects to each partition's
broker. The HTTP client never sees the difference: one WebSocket, one answer. A session whose
connection ended (its worker was killed) is replaced at the next ``for_topic``, which looks the
owner up again: the producers and consumers that lost it attach there (``reconnect.py``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.tls_identity import AUTH_METHOD_NAME as TLS_METHOD
from magnetar.broker.worker_credentials import IDENTITY
from magnetar.protocol import wire
from magnetar.websocket.session import Credentials, LocalSession, SessionError

if TYPE_CHECKING:
    from magnetar.broker.ownership import BrokerInfo
    from magnetar.broker.service import BrokerService
    from magnetar.broker.worker_credentials import Relayed
    from magnetar.protocol.topic_name import TopicName

log = logging.getLogger(__name__)

#: The key of the in-process session.
_HERE = ""


class Sessions:
    """``await for_topic(topic)``: the session that serves ``topic``; ``close()`` ends them all."""

    def __init__(self, service: BrokerService, credentials: Credentials, extra: dict[str, Any]) -> None:
        self.service = service
        self.credentials = credentials
        self._extra = extra
        self._opening: dict[str, asyncio.Future[LocalSession]] = {}
        #: Producer and consumer ids, unique over all the sessions.
        self._ids = itertools.count()
        self.closed = False

    async def local(self) -> LocalSession:
        """The in-process session (opened first: the client's credentials are checked at once)."""
        return await self._session(None)

    async def for_topic(self, topic: TopicName) -> LocalSession:
        """The session of ``topic``'s owner (SessionError: refused at CONNECT, or unreachable)."""
        return await self._session(self._owner(topic))

    def _owner(self, topic: TopicName) -> BrokerInfo | None:
        """The worker that owns ``topic``; None for this one."""
        service = self.service
        if not service.shares_bundles:
            return None
        try:
            owner = service.owner_of(topic)
        except (BrokerError, LookupError, ValueError):
            return None  # no such namespace, no live broker ...: the broker answers it as it would
        if owner is None or owner.broker_id == service.namespace_service.broker_id:
            return None
        return owner

    async def _session(self, owner: BrokerInfo | None) -> LocalSession:
        key = _HERE if owner is None else owner.broker_id
        future = self._opening.get(key)
        if future is not None and future.done() and not future.exception() and future.result().closed:
            future = None  # it ended (the owner restarted ...): open another
        if future is None:
            future = self._opening[key] = asyncio.ensure_future(self._open(owner))
        try:
            return await asyncio.shield(future)
        except BaseException:
            if self._opening.get(key) is future and future.done():
                del self._opening[key]  # the next caller tries again
            raise

    async def _open(self, owner: BrokerInfo | None) -> LocalSession:
        service = self.service
        if owner is None:
            session = await LocalSession.open(service, self.credentials, self._extra)
        else:
            if service.worker_secret is None:
                raise SessionError(f"{owner.broker_id} is another broker", wire.ServiceNotReady)
            session = await LocalSession.to_owner(service, owner, self.credentials, service.worker_secret)
            log.info("a session to %s for the topics it owns", owner.broker_id)
        session.share_ids(self._ids)
        if self.closed:
            session.close()
        return session

    def close(self) -> None:
        self.closed = True
        for future in self._opening.values():
            if future.done() and not future.cancelled() and future.exception() is None:
                future.result().close()
            else:
                future.add_done_callback(_close_when_open)
        self._opening.clear()


def owner_sessions(service: BrokerService) -> Callable[[BrokerInfo, Relayed], Awaitable[LocalSession]]:
    """What the broker's other protocols (MQTT: ``broker/mqtt/remote.py``) open a session to
    another worker with, for a client that proved ``relayed`` (``BrokerService.owner_sessions``)."""

    async def open_to(owner: BrokerInfo, relayed: Relayed) -> LocalSession:
        secret = service.worker_secret
        if secret is None:
            raise SessionError(f"{owner.broker_id} is another broker", wire.ServiceNotReady)
        if relayed.method == IDENTITY:  # the worker itself (an expired MQTT session's leftovers)
            return await LocalSession.to_owner(service, owner, Credentials(), secret, relayed)
        if relayed.method == "token":
            credentials = Credentials(token=relayed.data.decode())
        elif relayed.method == TLS_METHOD:
            credentials = Credentials(over_tls=True, certificate=relayed.certificate)
        else:
            credentials = Credentials()
        return await LocalSession.to_owner(service, owner, credentials, secret)

    return open_to


def _close_when_open(future: asyncio.Future[LocalSession]) -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().close()
