"""The broker process's service: storage, the binary-protocol server, topics, background work."""

from __future__ import annotations

import asyncio
import logging
import secrets

from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerCnx
from magnetar.broker.errors import NotAllowed, TopicNotFound
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_name import TopicName
from magnetar.storage.store import Storage

log = logging.getLogger(__name__)


class BrokerService:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_name = f"magnetar-{secrets.token_hex(3)}"
        self.topics: dict[str, PersistentTopic] = {}
        self.connections: set[ServerCnx] = set()
        self.storage: Storage | None = None
        self.port: int | None = None
        self.http_port: int | None = None
        self._server: asyncio.base_events.Server | None = None
        self._http = None
        self._tasks: list[asyncio.Task] = []

    @property
    def service_url(self) -> str:
        if self.config.advertised_address:
            return self.config.advertised_address
        return f"pulsar://{self.config.host}:{self.port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.storage = Storage(self.config.storage_config(), notify=loop.call_soon_threadsafe)
        self._server = await loop.create_server(
            lambda: ServerCnx(self), self.config.host, self.config.port, backlog=4096
        )
        self.port = self._server.sockets[0].getsockname()[1]
        from magnetar.admin.http import start_admin_server

        self._http, self.http_port = await start_admin_server(self, self.config.host, self.config.http_port)
        self._tasks = [
            asyncio.create_task(self._every(self.config.cursor_flush_interval_seconds, self.flush_all)),
            asyncio.create_task(self._every(self.config.retention_check_interval_seconds, self.trim_all)),
        ]

    async def stop(self) -> None:
        """Stop accepting, close every connection, flush cursors and state, close storage."""
        for task in self._tasks:
            task.cancel()
        if self._server is not None:
            self._server.close()
        for cnx in list(self.connections):
            cnx.close()
        if self._http is not None:
            await self._http.cleanup()
        # Let receipts already on their way out reach the clients.
        await asyncio.sleep(0)
        for topic in list(self.topics.values()):
            try:
                topic.close()
            except Exception:
                log.exception("closing topic %s failed", topic.name)
        self.topics.clear()
        if self.storage is not None:
            self.storage.close()
            self.storage = None

    async def _every(self, seconds: float, action) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                action()
            except Exception:
                log.exception("background task %s failed", getattr(action, "__name__", action))

    def flush_all(self) -> None:
        for topic in list(self.topics.values()):
            topic.flush()

    def trim_all(self) -> None:
        for topic in list(self.topics.values()):
            deleted = topic.ml.trim()
            if deleted:
                log.info("%s: deleted consumed ledgers %s", topic.name, deleted)

    # -- topics ---------------------------------------------------------------------------
    def get_topic(self, name: TopicName, create: bool = True) -> PersistentTopic:
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        if not name.persistent:
            raise NotAllowed("non-persistent topics are not supported yet")
        assert self.storage is not None
        exists = key in self.storage.managed_ledger_names()
        if not exists and not (create and self.config.allow_auto_topic_creation):
            raise TopicNotFound(f"Topic {key} does not exist")
        topic = PersistentTopic(name, self.storage.open_managed_ledger(key), self.config)
        self.topics[key] = topic
        return topic

    def partitions_of(self, name: TopicName) -> int:
        """Partition count of a partitioned topic; 0 for a plain topic."""
        return 0
