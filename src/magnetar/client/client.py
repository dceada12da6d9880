"""The asyncio client: service URL, topic lookup, partitioned metadata, a pool of connections.

Producers and consumers ask ``connection_for_topic``; the client looks the topic up (following
redirects), opens or reuses the connection to the owning broker, and the handler registers on
it. One connection per broker address is shared by every producer and consumer there.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import re
import ssl
from collections.abc import Callable
from typing import Any, TypeVar

from magnetar.client.authentication import Authentication
from magnetar.client.column_reader import ColumnReader
from magnetar.client.connection import Connection
from magnetar.client.consumer import Consumer, ConsumerConfig
from magnetar.client.errors import AlreadyClosed, ClientError, ConnectError, TopicLookupError
from magnetar.client.message import Message, MessageId
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer, consumer_for
from magnetar.client.options import check_options
from magnetar.client.partitioned_producer import PartitionedProducer, producer_for
from magnetar.client.pattern import pattern_consumer
from magnetar.client.producer import Producer, ProducerConfig
from magnetar.client.reader import READER_ARGUMENTS, Reader
from magnetar.client.service_url import is_tls_url, parse_service_url
from magnetar.client.services import Closable
from magnetar.client.table_view import TableView
from magnetar.client.tls import tls_options
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.topic_name import full_topic_name, partition_name

log = logging.getLogger(__name__)

_Lookup = wire.CommandLookupTopicResponse
_Handler = TypeVar("_Handler", bound=Closable)


class Client:
    """Entry point of the asyncio API: ``async with Client("pulsar://localhost:6650") as client: ...``.

    The producers and consumers it makes see it as ``ClientServices`` (services.py).
    """

    def __init__(
        self,
        service_url: str,
        *,
        operation_timeout_seconds: float = 30,
        connection_timeout_ms: int = 10_000,
        keepalive_interval_seconds: float = 30,
        initial_backoff_seconds: float = 0.1,
        max_backoff_seconds: float = 30,
        max_lookup_redirects: int = 20,
        partitions_update_interval_seconds: float = 60,
        listener_name: str | None = None,
        authentication: Authentication | None = None,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        tls_certificate_file_path: str | None = None,
        tls_private_key_file_path: str | None = None,
        **options: Any,
    ) -> None:
        check_options("Client", options)  # the rest are accepted only when they change nothing
        self.service_url = service_url
        self._hosts = parse_service_url(service_url)
        #: Credentials sent at each CONNECT (``AuthenticationToken``, ``AuthenticationTLS``), as
        #: the official client's.
        self.authentication = authentication
        #: Every connection goes over TLS when the service URL is pulsar+ssl:// (as the official
        #: client decides), with this context (client/tls.py); None: plain TCP.
        self.ssl_context: ssl.SSLContext | None = None
        self._scheme = "pulsar"
        if use_tls or is_tls_url(service_url):
            self._scheme = "pulsar+ssl"
            self.ssl_context = tls_options(
                authentication,
                tls_trust_certs_file_path,
                tls_validate_hostname,
                tls_allow_insecure_connection,
                tls_certificate_file_path,
                tls_private_key_file_path,
            ).context()
        self._host_cycle = itertools.cycle(range(len(self._hosts)))
        self.operation_timeout = float(operation_timeout_seconds)
        self.connection_timeout = connection_timeout_ms / 1000
        self.keepalive_interval = float(keepalive_interval_seconds)
        self.initial_backoff = initial_backoff_seconds
        self.max_backoff = max_backoff_seconds
        self.max_lookup_redirects = max_lookup_redirects
        #: How often a table view of a partitioned topic looks for partitions added since (the
        #: C++ client's ``partitionsUpdateInterval``, 60 s); 0: never.
        self.partitions_update_interval = float(partitions_update_interval_seconds)
        self.listener_name = listener_name
        self._pool: dict[str, asyncio.Future[Connection]] = {}
        self._producer_ids = itertools.count()
        self._consumer_ids = itertools.count()
        self._handlers: set[Closable] = set()
        self._closed = False

    # --- ids ------------------------------------------------------------------------------------
    def new_producer_id(self) -> int:
        return next(self._producer_ids)

    def new_consumer_id(self) -> int:
        return next(self._consumer_ids)

    # --- connections ------------------------------------------------------------------------------
    def _service_address(self) -> str:
        host, port = self._hosts[next(self._host_cycle)]
        return f"{self._scheme}://{host}:{port}"

    async def connection(self, logical: str, physical: str | None = None) -> Connection:
        """The pooled connection to ``logical`` (through ``physical`` when proxied), opened if needed."""
        if self._closed:
            raise AlreadyClosed("client is closed")
        physical = physical or logical
        key = f"{logical}|{physical}"
        future = self._pool.get(key)
        if future is not None and future.done():
            if future.exception() is None and not future.result().is_closed:
                return future.result()
            future = None
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._pool[key] = future
            try:
                host, port = parse_service_url(physical)[0]
                cnx = await Connection.open(
                    host,
                    port,
                    address=logical,
                    proxy_to_broker_url=logical if logical != physical else None,
                    connection_timeout=self.connection_timeout,
                    operation_timeout=self.operation_timeout,
                    keepalive_interval=self.keepalive_interval,
                    ssl_context=self.ssl_context,
                    authentication=self.authentication,
                )
            except BaseException as exc:
                self._pool.pop(key, None)
                future.set_exception(exc)
                future.exception()  # mark retrieved
                raise
            future.set_result(cnx)
            return cnx
        return await asyncio.shield(future)

    async def lookup(self, topic: str) -> tuple[str, str]:
        """(logical, physical) address of the broker serving ``topic``."""
        address = self._service_address()
        authoritative = False
        for _ in range(self.max_lookup_redirects):
            cnx = await self.connection(address)
            body = wire.CommandLookupTopic(topic=topic, request_id=0, authoritative=authoritative)
            if self.listener_name:
                body.advertised_listener_name = self.listener_name
            answer = await cnx.request(body)
            # Over TLS the broker's pulsar+ssl:// address is the one to follow.
            url = answer.broker_service_url_tls if self.ssl_context is not None else answer.broker_service_url
            target = url or address
            if answer.response == _Lookup.Connect:
                if answer.proxy_through_service_url:
                    return target, self._service_address()
                return target, target
            if answer.response == _Lookup.Redirect:
                address, authoritative = target, answer.authoritative
                continue
            raise TopicLookupError(f"lookup of {topic} failed: {answer.message}")
        raise TopicLookupError(f"lookup of {topic} redirected more than {self.max_lookup_redirects} times")

    async def connection_for_topic(self, topic: str) -> Connection:
        try:
            logical, physical = await self.lookup(topic)
            return await self.connection(logical, physical)
        except (TimeoutError, OSError) as exc:
            raise ConnectError(f"cannot reach the broker for {topic}: {exc!r}") from None

    async def get_partitioned_topic_metadata(self, topic: str) -> int:
        """Number of partitions of ``topic``; 0 when it is not partitioned."""
        cnx = await self.connection(self._service_address())
        answer = await cnx.request(
            wire.CommandPartitionedTopicMetadata(topic=full_topic_name(topic), request_id=0)
        )
        return answer.partitions

    async def get_topics_of_namespace(
        self,
        namespace: str,
        mode: wire.CommandGetTopicsOfNamespace.Mode.ValueType,
        topics_hash: str | None = None,
        topics_pattern: str | None = None,
    ) -> wire.CommandGetTopicsOfNamespaceResponse:
        """The broker's list of ``namespace``'s topics (partitions included); with the hash of
        an earlier answer, a reply with ``changed`` False when the list is the same; with a
        regex subscription's ``topics_pattern``, the broker may list only the matching topics
        (``filtered``)."""
        cnx = await self.connection(self._service_address())
        body = wire.CommandGetTopicsOfNamespace(namespace=namespace, mode=mode)
        if topics_hash is not None:
            body.topics_hash = topics_hash
        if topics_pattern is not None:
            body.topics_pattern = topics_pattern
        return await cnx.request(body)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partition topics of ``topic``, or ``[topic]`` when it is not partitioned."""
        topic = full_topic_name(topic)
        partitions = await self.get_partitioned_topic_metadata(topic)
        if partitions <= 0:
            return [topic]
        return [partition_name(topic, i) for i in range(partitions)]

    # --- producers, consumers, readers ------------------------------------------------------------
    async def create_producer(self, topic: str, **options: Any) -> Producer | PartitionedProducer:
        """A producer for ``topic``; options as the official client's ``create_producer``
        (client/options.py says which are supported)."""
        check_options("create_producer", options)
        config = ProducerConfig(**_known(ProducerConfig, options))
        producer = await producer_for(self, full_topic_name(topic), config, options.get("message_router"))
        return await self._start(producer)

    async def subscribe(
        self, topic: str | list[str] | re.Pattern[str], subscription_name: str, **options: Any
    ) -> Consumer | MultiTopicsConsumer:
        """A consumer on ``topic``: a name, a list of names, or a compiled regex over the names of
        a namespace's topics (``pattern_auto_discovery_period``, seconds, how often it looks
        for new ones: 60); options as the official client's (client/options.py). A
        ``message_listener(consumer, message)`` runs on the event loop."""
        check_options("subscribe", options)
        config = ConsumerConfig(subscription_name=subscription_name, **_known(ConsumerConfig, options))
        consumer: Consumer | MultiTopicsConsumer
        if isinstance(topic, re.Pattern):
            consumer = await self._start(pattern_consumer(self, topic, config, options))
        else:
            topics = [full_topic_name(t) for t in ([topic] if isinstance(topic, str) else topic)]
            consumer = await self._start(await consumer_for(self, topics, config))
        _set_listener(consumer, options.get("message_listener"))
        return consumer

    async def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> Reader:
        """A reader of ``topic`` starting at ``start_message_id`` (a MessageId); options as the
        official client's (client/options.py). A ``reader_listener(reader, message)`` runs on
        the event loop."""
        check_options("create_reader", options)
        args = {k: v for k, v in options.items() if k in READER_ARGUMENTS and v is not None}
        reader = await self._start(Reader(self, full_topic_name(topic), start_message_id, **args))
        _set_listener(reader, options.get("reader_listener"))
        return reader

    async def create_column_reader(
        self, topic: str, start_message_id: MessageId, **options: Any
    ) -> ColumnReader:
        """A ``ColumnReader`` of ``topic`` (one partition) from ``start_message_id``: messages come
        as columns (``receive_columns``), for bulk reads. Options as ``create_reader``'s, less
        the listener."""
        check_options("create_reader", options)
        if options.get("reader_listener") is not None:
            raise ValueError("a ColumnReader takes no reader_listener")
        args = {k: v for k, v in options.items() if k in READER_ARGUMENTS and v is not None}
        return await self._start(ColumnReader(self, full_topic_name(topic), start_message_id, **args))

    async def create_table_view(
        self, topic: str, subscription_name: str | None = None, **options: Any
    ) -> TableView:
        """A ``TableView`` of ``topic``: the latest value of each key, over all its partitions, read
        compacted from the earliest message (table_view.py). Returns once it holds what the topic
        held; ``subscription_name`` names its readers' subscriptions (random otherwise). Options as
        the official client's (``schema``: bytes only)."""
        check_options("create_table_view", options)
        topic = full_topic_name(topic)
        partitions = await self.get_partitioned_topic_metadata(topic)

        async def open_readers(names: list[str]) -> list[Reader]:
            """Readers of these partitions from the earliest message, read compacted (all or none)."""
            started = await asyncio.gather(
                *(
                    self._start(
                        Reader(
                            self,
                            name,
                            MessageId.earliest,
                            is_read_compacted=True,
                            subscription_name=subscription_name,
                        )
                    )
                    for name in names
                ),
                return_exceptions=True,
            )
            readers = [reader for reader in started if isinstance(reader, Reader)]
            failure = next((e for e in started if isinstance(e, BaseException)), None)
            if failure is not None:
                for reader in readers:
                    await reader.close()
                raise failure
            return readers

        names = [partition_name(topic, i) for i in range(partitions)] if partitions > 0 else [topic]
        table_view = TableView(topic, await open_readers(names), subscription_name)
        if partitions > 0 and self.partitions_update_interval > 0:
            table_view.follow_partitions(
                lambda: self.get_partitioned_topic_metadata(topic),
                lambda first, count: open_readers([partition_name(topic, i) for i in range(first, count)]),
                self.partitions_update_interval,
            )
        return await self._start(table_view)

    async def _start(self, handler: _Handler) -> _Handler:
        if self._closed:
            raise AlreadyClosed("client is closed")
        self._handlers.add(handler)
        try:
            await handler.start()
        except BaseException:
            self._handlers.discard(handler)
            raise
        return handler

    def forget(self, handler: Closable) -> None:
        self._handlers.discard(handler)

    async def close(self) -> None:
        """Close every producer and consumer, then every connection."""
        if self._closed:
            return
        for handler in list(self._handlers):
            try:
                await handler.close()
            except ClientError as exc:
                log.debug("closing %s: %s", handler, exc)
        self._closed = True
        pool, self._pool = self._pool, {}
        for future in pool.values():
            if future.done() and future.exception() is None:
                await future.result().close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _set_listener(
    consumer: Consumer | MultiTopicsConsumer,
    listener: Callable[[Consumer | MultiTopicsConsumer, Message], None] | None,
) -> None:
    """Hand each message to ``listener(consumer, message)`` as the official client's listeners."""
    if listener is not None:
        consumer.set_listener(lambda msg: listener(consumer, msg))


def _known(cls: type[ProducerConfig] | type[ConsumerConfig], options: dict[str, Any]) -> dict[str, Any]:
    """The options a config dataclass knows; ``None`` means its default, as in the official client."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in options.items() if k in fields and v is not None}
