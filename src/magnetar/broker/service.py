"""The broker process's service: storage, the binary-protocol server, topics, background work."""

from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from magnetar.broker import descriptors, loop_pass, tls
from magnetar.broker.authentication import Authentication
from magnetar.broker.authorization import CONSUME, PRODUCE, Authorizer
from magnetar.broker.config import BrokerConfig
from magnetar.broker.connection import ServerCnx
from magnetar.broker.data_dir_lock import DataDirLock
from magnetar.broker.errors import NotAllowed, TopicNotFound
from magnetar.broker.flow_control import Hold, PublishBuffer, no_holds
from magnetar.broker.frame_budget import FrameBudget
from magnetar.broker.limits import Limits
from magnetar.broker.namespaces import AlreadyExists, AutoTopicCreation, NamespaceRegistry, NotEmpty
from magnetar.broker.nonpersistent import NonPersistentTopic
from magnetar.broker.schemas.registry import SchemaRegistry
from magnetar.broker.topic import PersistentTopic
from magnetar.protocol.frames import SHARED_READ_SIZE
from magnetar.protocol.topic_name import TopicName, partition_name
from magnetar.storage.store import Storage

log = logging.getLogger(__name__)

#: Threads that open topics and create subscriptions (files, fsyncs, metadata commits) off the
#: loop. Their work is mostly waiting for the disk, so a few overlap it (and their metadata
#: writes share commits); more did not go faster on 2 cores (bench/topic_storm.py).
OPEN_THREADS = 4


class BrokerService:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_name = f"magnetar-{secrets.token_hex(3)}"
        self.topics: dict[str, PersistentTopic] = {}
        self.connections: set[ServerCnx] = set()
        #: Every connection reads the socket into this buffer (one loop, one read at a time) and
        #: keeps only the bytes of an incomplete frame: an idle connection holds no read buffer.
        self.read_buffer = bytearray(SHARED_READ_SIZE)
        #: How often connections stopped being read, by reason (flow_control.py).
        self.hold_times: dict[int, int] = no_holds()
        #: Bytes of the sends awaiting receipts, all connections together (flow_control.py).
        self.publish_buffer = PublishBuffer(
            config.max_message_publish_buffer_bytes,
            on_full=lambda: self._hold_all(Hold.BROKER),
            on_room=lambda: self._release_all(Hold.BROKER),
        )
        #: Room for large frames being received, all connections together (frame_budget.py).
        self.frame_budget = FrameBudget(config.max_incomplete_frame_bytes)
        #: Connections closed over a frame's size or a stalled large frame, by reason (/metrics).
        self.frame_closes: dict[str, int] = dict.fromkeys(
            ("too_large_before_connect", "too_large", "stalled"), 0
        )
        #: Connections, producers, consumers and topics past the configured limits are refused.
        self.limits = Limits(config)
        #: New topics are counted and created one at a time where a namespace's topics are limited.
        self._topic_count_lock = threading.Lock()
        #: The authentication providers, None while authentication is off (authentication.py).
        self.authentication = Authentication.from_config(config)
        #: Credentials accepted and refused (CONNECT, AUTH_RESPONSE, expiry), by auth method (/metrics).
        self.authentication_successes: Counter[str] = Counter()
        self.authentication_failures: Counter[str] = Counter()
        #: Grants checked against the namespaces' policies; None while authorization is off.
        self.authorization: Authorizer | None = None
        if config.authorization_enabled:
            self.authorization = Authorizer(
                config.superuser_roles,
                lambda tenant: self.namespaces.tenant(tenant),
                lambda namespace: self.namespaces.auth_policies(namespace),
                config.authorization_allow_wildcards_matching,
            )
        #: Requests refused for want of a permission, by operation (/metrics).
        self.authorization_failures: Counter[str] = Counter()
        self.storage: Storage | None = None
        self.namespaces: NamespaceRegistry | None = None
        self.schemas: SchemaRegistry | None = None
        self.port: int | None = None
        #: The pulsar+ssl:// port as bound; None while TLS is off (broker/tls.py).
        self.tls_port: int | None = None
        #: The server side of TLS (broker/tls.py), made at start; the HTTPS port serves with it too.
        self.ssl_context: ssl.SSLContext | None = None
        self._server: asyncio.base_events.Server | None = None
        self._tls_server: asyncio.base_events.Server | None = None
        self._tasks: list[asyncio.Task] = []
        self._lock = DataDirLock(config.data_dir)
        self._openers = ThreadPoolExecutor(OPEN_THREADS, thread_name_prefix="magnetar-open")
        #: Topics being opened on ``_openers``: the future of their managed ledger.
        self._opening: dict[str, asyncio.Future] = {}

    def _hold_all(self, reason: int) -> None:
        log.debug("publish buffer over %d bytes: not reading any connection", self.publish_buffer.limit)
        for cnx in self.connections:
            cnx.holds.hold(reason)

    def _release_all(self, reason: int) -> None:
        for cnx in list(self.connections):
            cnx.holds.release(reason)

    def frame_room_released(self, cnx: ServerCnx) -> None:
        """``cnx`` gives back its room for a large frame (or leaves the line): let the next ones in."""
        for waiter in self.frame_budget.release(cnx, time.monotonic()):
            waiter.frame_room_granted()

    def frame_budget_full(self, cnx: ServerCnx, size: int) -> None:
        budget = self.frame_budget
        if len(budget.waiters) == 1:  # once per time it fills up, not per waiting connection
            log.warning(
                "large frames being received hold %d bytes (max_incomplete_frame_bytes %d): "
                "%s waits to receive a frame of %d bytes; frames stalled for %.0f s will be dropped",
                budget.bytes,
                budget.limit,
                cnx.remote,
                size,
                self.config.incomplete_frame_timeout_seconds,
            )

    def close_stalled_frames(self) -> None:
        """Close the connections whose large frame has held its room too long while others wait.

        A connection we do not read for our own reasons (its sends await receipts, the publish
        buffer is full) is not to blame for its frame's delay, and is left alone.
        """
        now = time.monotonic()
        timeout = self.config.incomplete_frame_timeout_seconds
        ours = Hold.SENDS | Hold.BROKER
        for cnx in self.frame_budget.overdue(now, timeout):
            if not self.frame_budget.waiters:
                break  # the room freed so far was enough
            if not cnx.holds.held & ours:
                size, since = self.frame_budget.holders[cnx]
                cnx.close_for_stalled_frame(size, now - since)
                self.frame_room_released(cnx)

    @property
    def service_url(self) -> str | None:
        """pulsar:// address given in LOOKUP answers; None while the plain port is off
        (``broker_service_port_enabled``): an answer names only ports that are served."""
        if self.port is None:
            return None
        if self.config.advertised_address:
            return self.config.advertised_address
        return f"pulsar://{self.config.host}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        """pulsar+ssl:// address given in LOOKUP answers (clients on TLS connect there); None without TLS."""
        if self.tls_port is None:
            return None
        host = self.config.host
        if self.config.advertised_address:
            host = urllib.parse.urlsplit(self.config.advertised_address).hostname or host
        return f"pulsar+ssl://{host}:{self.tls_port}"

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # Certificate problems are found before anything else starts (TlsConfigError).
        ssl_context = tls.server_context(self.config) if tls.tls_enabled(self.config) else None
        self.ssl_context = ssl_context
        self._lock.acquire()
        passes = loop_pass.for_loop(loop)
        self.storage = Storage(
            self.config.storage_config(),
            notify=_notifier(loop, passes),
            defer=lambda callback: passes.defer(loop_pass.SYNC, callback),
        )
        self.namespaces = NamespaceRegistry(self.storage.metadata)
        self.schemas = SchemaRegistry(self.storage.metadata, self.namespaces)
        if self.config.broker_service_port_enabled:
            self._server = await loop.create_server(
                lambda: ServerCnx(self), self.config.host, self.config.port, backlog=4096
            )
            self.port = self._server.sockets[0].getsockname()[1]
        if self.config.broker_service_port_tls is not None:
            self._tls_server = await loop.create_server(
                lambda: ServerCnx(self),
                self.config.host,
                self.config.broker_service_port_tls,
                backlog=4096,
                ssl=ssl_context,
                ssl_handshake_timeout=tls.HANDSHAKE_TIMEOUT_S,
            )
            self.tls_port = self._tls_server.sockets[0].getsockname()[1]
        self._tasks = [
            asyncio.create_task(self._every(self.config.cursor_flush_interval_seconds, self.flush_all)),
            asyncio.create_task(self._every(self.config.retention_check_interval_seconds, self.trim_all)),
            asyncio.create_task(
                self._every(self.config.message_expiry_check_interval_seconds, self.expire_messages)
            ),
            asyncio.create_task(self._every(self.config.stats_update_frequency_seconds, self.update_rates)),
            asyncio.create_task(
                self._every(self.config.backlog_quota_check_interval_seconds, self.check_backlog_quotas)
            ),
            asyncio.create_task(
                self._every(
                    min(1.0, self.config.incomplete_frame_timeout_seconds / 4), self.close_stalled_frames
                )
            ),
        ]
        if self.authentication is not None:
            self._tasks.append(
                asyncio.create_task(
                    self._every(self.config.authentication_refresh_check_seconds, self.check_credentials)
                )
            )

    def check_credentials(self) -> None:
        """Challenge connections whose credentials expired; close those that did not answer."""
        now = time.time()
        for cnx in list(self.connections):
            cnx.check_credentials(now)

    async def stop(self) -> None:
        """Stop accepting, close every connection, flush cursors and state, close storage."""
        for task in self._tasks:
            task.cancel()
        for server in (self._server, self._tls_server):
            if server is not None:
                server.close()
        for cnx in list(self.connections):
            cnx.close()
        self._openers.shutdown(wait=True)  # opens under way finish before storage closes
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
        self._lock.release()

    async def _every(self, seconds: float, action) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                action()
            except Exception:
                log.exception("background task %s failed", getattr(action, "__name__", action))

    def update_rates(self) -> None:
        """Every topic's, producer's and consumer's rates over the stats interval just ended."""
        now = time.monotonic()
        for topic in list(self.topics.values()):
            topic.traffic.update_rates(now)
            for producer in topic.producers.values():
                producer.traffic.update_rates(now)
            for subscription in topic.subscriptions.values():
                subscription.traffic.update_rates(now)
                for consumer in subscription.consumers:
                    consumer.traffic.update_rates(now)

    def check_backlog_quotas(self) -> None:
        """Apply each persistent topic's backlog quota policy where its backlog is past a limit."""
        for topic in list(self.topics.values()):
            if topic.ml is None:
                continue
            kind = topic.enforce_backlog_quota()
            if kind is not None:
                log.info("%s: backlog quota exceeded (%s)", topic.name, kind)

    def flush_all(self) -> None:
        for topic in list(self.topics.values()):
            topic.flush()

    def expire_messages(self) -> None:
        """Message TTL: in namespaces with a TTL, acknowledge for every subscription what is older
        (by broker time, found with a binary search)."""
        for topic in list(self.topics.values()):
            if topic.ml is None:
                continue
            ttl = self.namespaces.policies(topic.name.namespace_name).message_ttl_seconds
            if not ttl:
                continue
            for name in topic.expire_older_than(ttl):
                log.info("%s/%s: expired messages older than %ds", topic.name, name, ttl)

    def trim_all(self) -> None:
        for topic in list(self.topics.values()):
            if topic.ml is None:
                continue
            policies = self.namespaces.policies(topic.name.namespace_name)
            time_s = size_b = None
            if policies.retention_time_minutes is not None:
                time_s = policies.retention_time_minutes * 60.0
            if policies.retention_size_mb is not None:
                size_b = policies.retention_size_mb * 1024 * 1024
            deleted = topic.trim(time_s, size_b)  # flushes the topic state first
            if deleted:
                log.info("%s: deleted consumed ledgers %s", topic.name, deleted)

    # -- topics ---------------------------------------------------------------------------
    def check_namespace(self, name: TopicName) -> None:
        self.namespaces.policies(name.namespace_name)  # raises NamespaceNotFound

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation:
        policy = self.namespaces.policies(namespace).auto_topic_creation
        if policy is not None:
            return AutoTopicCreation.from_json(policy)
        return AutoTopicCreation(
            allow_auto_topic_creation=self.config.allow_auto_topic_creation,
            topic_type=self.config.auto_topic_creation_type,
            default_num_partitions=self.config.default_num_partitions,
        )

    def _exists(self, key: str) -> bool:
        return key in self.topics or self.storage.has_managed_ledger(key)

    def get_topic(self, name: TopicName, create: bool = True) -> PersistentTopic | NonPersistentTopic:
        key = str(name)
        topic = self.topics.get(key)
        if topic is not None:
            return topic
        self.check_namespace(name)
        if not name.persistent:
            if not (create and self.auto_topic_creation(name.namespace_name).allow_auto_topic_creation):
                raise TopicNotFound(f"Topic {key} does not exist")
            topic = NonPersistentTopic(name, self.config)
            self.topics[key] = topic
            return topic
        self._check_creatable(name, create)
        return self._add_topic(name, self._open_managed_ledger(key))

    def preparing(
        self, name: TopicName, subscription: tuple[str, str] | None = None
    ) -> asyncio.Future | None:
        """Open the persistent topic ``name`` (and create its durable ``subscription``, a
        (name, initial position) pair) on the open threads; None when there is nothing to do.
        The checks run there too (they query the metadata store); a refusal fails the future
        with its BrokerError, and ``get_topic`` says it again on the loop.

        Opening a topic and creating a subscription write files, fsync them and commit metadata:
        milliseconds each, which on the loop would hold up every other client (2,000 topics at
        once stalled unrelated producers for seconds). The caller answers its client when the
        future is done, so a topic or subscription is durable before a client hears it exists.
        """
        key = str(name)
        topic = self.topics.get(key)
        if topic is None:
            if not name.persistent:
                return None
        elif subscription is None or subscription[0] in topic.subscriptions or topic.ml is None:
            return None
        return asyncio.ensure_future(self._prepare(name, subscription))

    async def _prepare(self, name: TopicName, subscription: tuple[str, str] | None) -> None:
        key = str(name)
        if key not in self.topics:
            opening = self._opening.get(key)
            if opening is None:
                loop = asyncio.get_running_loop()
                opening = loop.run_in_executor(self._openers, self._check_and_open, name)
                self._opening[key] = opening
                opening.add_done_callback(lambda done: self._opened(name, done))
            await asyncio.shield(opening)
        topic = self.topics.get(key)
        if subscription is not None and isinstance(topic, PersistentTopic):
            await topic.prepare_subscription(*subscription, executor=self._openers)

    def _check_and_open(self, name: TopicName):
        """On an open thread: may ``name`` be loaded (raises why not), then its managed ledger."""
        self.check_namespace(name)
        if not self._topics_limited(name.namespace_name):
            self._check_creatable(name, True)
            return self._open_managed_ledger(str(name))
        with self._topic_count_lock:  # two new topics at once must not both take the last place
            self._check_creatable(name, True)
            return self._open_managed_ledger(str(name))

    def _topics_limited(self, namespace: str) -> bool:
        return self.limits.topics_limited(self.namespaces.policies(namespace).max_topics_per_namespace)

    def check_topic_count(self, namespace: str, new: int) -> None:
        """Raise LimitReached when ``new`` more persistent topics (partitions each count) would put
        ``namespace`` past its max_topics_per_namespace. Counted as Pulsar does: the persistent
        topics stored, and every partition of its partitioned topics."""
        namespace_max = self.namespaces.policies(namespace).max_topics_per_namespace
        if not self.limits.topics_limited(namespace_max):
            return
        prefix = f"persistent://{namespace}/"
        names = {n for n in self.storage.managed_ledger_names() if n.startswith(prefix)}
        for base in self.namespaces.partitioned_topics(namespace, "persistent"):
            names.update(partition_name(base, i) for i in range(self.namespaces.partitions(base)))
        self.limits.check_topics(namespace, len(names), new, namespace_max)

    def _open_managed_ledger(self, key: str):
        """The topic's managed ledger; PersistenceError when its files cannot be opened (the
        descriptors left are the reserve, EMFILE, another I/O error)."""
        try:
            descriptors.check_reserve("topic", key)
            return self.storage.open_managed_ledger(key)
        except OSError as exc:
            raise descriptors.storage_error("topic", key, exc) from None

    def _opened(self, name: TopicName, done: asyncio.Future) -> None:
        key = str(name)
        del self._opening[key]
        if done.cancelled() or done.exception() is not None or self.storage is None:
            return
        if key not in self.topics:
            self._add_topic(name, done.result())

    def _check_creatable(self, name: TopicName, create: bool) -> None:
        """Raise why the persistent topic ``name`` may not be loaded (or created) now."""
        key = str(name)
        if not self._exists(key):
            base = name.partitioned_base()
            partition_of_known = base is not None and 0 <= name.partition_index < self.namespaces.partitions(
                str(base)
            )
            allowed = create and self.auto_topic_creation(name.namespace_name).allow_auto_topic_creation
            if not (partition_of_known or allowed):
                raise TopicNotFound(f"Topic {key} does not exist")
            if self.namespaces.partitions(key):
                raise NotAllowed(f"Topic {key} is partitioned: use its partitions")
            if not partition_of_known:
                self.check_topic_count(name.namespace_name, 1)

    def _add_topic(self, name: TopicName, ml) -> PersistentTopic:
        key = str(name)
        topic = self.topics.get(key)
        if isinstance(topic, PersistentTopic):
            return topic  # opened meanwhile by another path, on the same managed ledger
        namespace = name.namespace_name
        topic = PersistentTopic(name, ml, self.config, policies=lambda: self.namespaces.policies(namespace))
        self.topics[key] = topic
        return topic

    def partitions_of(self, name: TopicName, auto_create: bool = True) -> int:
        """Partition count of a partitioned topic; 0 for a plain topic.

        As in Pulsar, asking about a topic that does not exist creates it as partitioned
        when the namespace's auto-creation says so.
        """
        self.check_namespace(name)
        key = str(name)
        count = self.namespaces.partitions(key)
        if count or not auto_create or name.partition_index >= 0 or self._exists(key):
            return count
        policy = self.auto_topic_creation(name.namespace_name)
        if policy.allow_auto_topic_creation and policy.topic_type == "partitioned":
            if name.persistent:
                self.check_topic_count(name.namespace_name, policy.default_num_partitions)
            self.namespaces.set_partitions(key, policy.default_num_partitions)
            return policy.default_num_partitions
        return 0

    def create_partitioned_topic(self, name: TopicName, count: int) -> None:
        self.check_namespace(name)
        key = str(name)
        if name.partition_index >= 0:
            raise NotAllowed(f"{key} is already a partition name")
        if self.namespaces.partitions(key):
            raise AlreadyExists(f"Partitioned topic {key} already exists")
        if self._exists(key):
            raise AlreadyExists(f"Topic {key} already exists as a non-partitioned topic")
        if name.persistent:
            self.check_topic_count(name.namespace_name, count)
        self.namespaces.set_partitions(key, count)

    def update_partitioned_topic(self, name: TopicName, count: int) -> None:
        current = self.namespaces.partitions(str(name))
        if not current:
            raise TopicNotFound(f"Partitioned topic {name} does not exist")
        if count < current:
            raise NotAllowed(f"the number of partitions can only grow (now {current})")
        if name.persistent and count > current:
            self.check_topic_count(name.namespace_name, count - current)
        self.namespaces.set_partitions(str(name), count)

    def delete_partitioned_topic(self, name: TopicName) -> None:
        count = self.namespaces.partitions(str(name))
        if not count:
            raise TopicNotFound(f"Partitioned topic {name} does not exist")
        for i in range(count):
            partition = name.partition(i)
            if self._exists(str(partition)):
                self.delete_topic(partition)
        self.namespaces.delete_partitions(str(name))

    def create_topic(self, name: TopicName) -> None:
        self.check_namespace(name)
        key = str(name)
        if self._exists(key) or self.namespaces.partitions(key):
            raise AlreadyExists(f"Topic {key} already exists")
        self.get_topic(name, create=True)

    def delete_topic(self, name: TopicName) -> None:
        key = str(name)
        if not self._exists(key):
            raise TopicNotFound(f"Topic {key} does not exist")
        topic = self.topics.get(key)
        if topic is not None:
            if topic.producers or any(s.consumers for s in topic.subscriptions.values()):
                raise NotEmpty(f"Topic {key} has connected producers or consumers")
            topic.close()
            del self.topics[key]
            if topic.ml is None:
                return
        self.storage.delete_managed_ledger(key)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        """Every topic (partitions included) stored or loaded in ``namespace``."""
        names = set(self.storage.managed_ledger_names()) | set(self.topics)
        out = []
        for key in names:
            try:
                if TopicName.parse(key).namespace_name == namespace:
                    out.append(key)
            except ValueError:
                continue
        return sorted(out)

    def topic_list(self, namespace: str, mode: int = 0) -> list[str]:
        """Topics of a namespace for GET_TOPICS_OF_NAMESPACE: stored ones and every partition
        of its partitioned topics. ``mode``: 0 persistent, 1 non-persistent, 2 all."""
        self.namespaces.policies(namespace)
        names = set(self.topics_of_namespace(namespace))
        for domain in ("persistent", "non-persistent"):
            for base in self.namespaces.partitioned_topics(namespace, domain):
                names.update(partition_name(base, i) for i in range(self.namespaces.partitions(base)))
        wanted = {0: ("persistent://",), 1: ("non-persistent://",), 2: ("persistent://", "non-persistent://")}
        prefixes = wanted.get(mode, ("persistent://",))
        return sorted(n for n in names if n.startswith(prefixes))

    def apply_policies(self, namespace: str) -> None:
        """Policies are read when used; nothing is cached that would need refreshing."""

    def recheck_permissions(self, namespace: str) -> None:
        """After the namespace's grants changed, close the producers and consumers whose role lost
        its permission, as Pulsar's ``Producer/Consumer.checkPermissionsAsync`` on a policies update:
        the client reconnects and is then refused with AuthorizationError."""
        authz = self.authorization
        if authz is None:
            return
        for cnx in list(self.connections):
            for producer in list(cnx.producers.values()):
                topic = producer.topic.name
                if topic.namespace_name == namespace and not authz.can_topic(topic, cnx.role, PRODUCE):
                    log.info("%r is not allowed to produce on %s anymore: producer closed", cnx.role, topic)
                    producer.close_by_broker()
            for consumer in list(cnx.consumers.values()):
                topic = consumer.subscription.topic.name
                if topic.namespace_name == namespace and not authz.can_topic(topic, cnx.role, CONSUME):
                    log.info("%r is not allowed to consume from %s anymore: consumer closed", cnx.role, topic)
                    consumer.close_by_broker()
                    cnx.forget_consumer(consumer.consumer_id)
                    consumer.subscription.remove_consumer(consumer)


def _notifier(loop: asyncio.AbstractEventLoop, passes: loop_pass.PassScheduler):
    """How storage completions reach the loop: from the fsync thread through the thread-safe
    path (which wakes the loop) and then straight through the pass's phases; from the loop
    itself (fsync policy "never") as the pass's first phase, which spares a wake-up write
    per message."""
    loop_thread = threading.get_ident()

    def notify(callback) -> None:
        if threading.get_ident() == loop_thread:
            passes.defer(loop_pass.COMPLETE, callback)
        else:
            loop.call_soon_threadsafe(passes.run_now, callback)

    return notify
