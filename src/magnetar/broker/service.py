"""The broker process's service: storage, the binary-protocol server, topics, background work.

``BrokerService`` is the façade the connections' handlers and the admin API call; it composes
resources.py (storage and the registries in its metadata store, opened at start),
topic_catalog.py (which topics there are, partitioned topics' metadata, topic counts),
topic_loader.py (opening topics, off the loop where the command can wait), housekeeping.py (the
background work) and frame_room.py (room for large frames being received). What it is made from
is checked and built at start-up (startup.py); its connections are made above it (server.py) and
kept here as ``ServedCnx`` (served_cnx.py).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import ssl
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Protocol, TypeVar

from magnetar.broker import (
    descriptors,
    frame_room,
    housekeeping,
    loop_pass,
    memory,
    offload_policies,
    tls,
    worker_credentials,
)
from magnetar.broker.authorization import CONSUME, PRODUCE, Authorizer
from magnetar.broker.bundles import NamespaceBundle
from magnetar.broker.clusters import ClusterRegistry
from magnetar.broker.compaction_policies import TopicCompactionThresholds, applied_threshold
from magnetar.broker.config import BrokerConfig
from magnetar.broker.data_dir_lock import DataDirLock
from magnetar.broker.dispatchers.broadcast_lag import LagLimits
from magnetar.broker.errors import TopicNotFound
from magnetar.broker.flow_control import Hold, PublishBuffer, no_holds
from magnetar.broker.frame_budget import FrameBudget, FrameReceiver
from magnetar.broker.inactive_topic_policies import InactiveTopicPolicies
from magnetar.broker.inactive_topics import InactiveTopics
from magnetar.broker.keepalive import KeepaliveWheel
from magnetar.broker.limits import Limits
from magnetar.broker.listener import Listener, listen
from magnetar.broker.namespace_service import NamespaceService
from magnetar.broker.namespaces import AutoTopicCreation, NamespaceRegistry
from magnetar.broker.nonpersistent import NonPersistentTopic
from magnetar.broker.offload_policies import OffloadPolicies
from magnetar.broker.offloads import Offloads
from magnetar.broker.ownership import BrokerInfo, LocalOwnership, OwnershipStore
from magnetar.broker.refusal import PULSAR_OUT_OF_DESCRIPTORS
from magnetar.broker.replication import TopicReplication, effective_clusters
from magnetar.broker.resources import BrokerNotStarted, BrokerResources
from magnetar.broker.schemas.registry import SchemaRegistry
from magnetar.broker.served_cnx import ServedCnx
from magnetar.broker.spread import Spread
from magnetar.broker.startup import BrokerSetup
from magnetar.broker.topic import PersistentTopic
from magnetar.broker.topic_catalog import TopicCatalog, Topics
from magnetar.broker.topic_loader import TopicLoader
from magnetar.broker.worker_credentials import Relayed, WorkerSecret
from magnetar.broker.worker_role import WorkerRole
from magnetar.offload.offloader import LedgerOffloader
from magnetar.protocol.frames import SHARED_READ_SIZE
from magnetar.protocol.topic_name import TopicName
from magnetar.storage import ledger_files
from magnetar.storage.store import Storage

log = logging.getLogger(__name__)

T = TypeVar("T")
#: The name of the thread that lists topics (tests look for it).
LISTING_THREAD = "magnetar-list"
#: The name of the thread that compacts topics.
COMPACTION_THREAD = "magnetar-compaction"
#: How often a broker sharing bundles renews its session (a third of the store's lease) and
#: looks for policies changed by the others (what "at once" means across workers).
OWNERSHIP_RENEW_SECONDS = 3.0
POLICY_POLL_SECONDS = 0.1
#: How often idle followers (spread.py) are looked for.
SPREAD_SWEEP_SECONDS = 5.0


class BrokerService:
    """The broker; made from what start-up checked and built (``startup.BrokerSetup``)."""

    def __init__(
        self, setup: BrokerSetup, ownership: OwnershipStore | None = None, worker: WorkerRole | None = None
    ) -> None:
        """``ownership``: the store of bundle owners shared with other brokers (workers); alone
        (None), this broker owns every bundle. ``worker``: this broker is one of a supervisor's
        workers (worker_role.py): no data directory lock, no directory check, and ports of its own
        beside the shared ones."""
        config = self.config = setup.config
        self.worker = worker
        self._ownership: OwnershipStore = ownership or LocalOwnership()
        self._ownership_shared = ownership is not None
        self._namespace_service: NamespaceService | None = None
        self.broker_name = f"magnetar-{secrets.token_hex(3)}"
        self.topics: Topics = {}
        #: The connections served now, added and removed by each (``served_cnx.py``).
        self.connections: set[ServedCnx] = set()
        self._flow_control(config)
        #: Connections, producers, consumers and topics past the configured limits are refused.
        self.limits = Limits(config)
        self._security(setup)
        #: Broker entry metadata interceptors for each topic loaded (entry_metadata.py).
        self._interceptors = setup.interceptors
        self._resources: BrokerResources | None = None
        self._catalog: TopicCatalog | None = None
        self._loader: TopicLoader | None = None
        #: Lists a namespace's topics (GET_TOPICS_OF_NAMESPACE, the admin lists) off the loop.
        self._listing = ThreadPoolExecutor(1, thread_name_prefix=LISTING_THREAD)
        #: Runs topic compactions (both phases), one at a time, apart from the open threads: a
        #: long compaction holds up no topic's load (compacted_topic.py).
        self.compaction_executor = ThreadPoolExecutor(1, thread_name_prefix=COMPACTION_THREAD)
        self.port: int | None = None
        #: The pulsar+ssl:// port as bound; None while TLS is off (broker/tls.py).
        self.tls_port: int | None = None
        #: The server side of TLS (broker/tls.py), made at start; the HTTPS port serves with it too.
        self.ssl_context: ssl.SSLContext | None = None
        self._server: Listener | None = None
        self._tls_server: Listener | None = None
        #: A worker's listeners on the advertised ports, shared with the other workers (SO_REUSEPORT).
        self._shared_servers: list[Listener] = []
        self._tasks: list[asyncio.Task[None]] = []
        #: Every connection's keepalive, one wheel for all (keepalive.py).
        self.keepalive = KeepaliveWheel(config.keepalive_interval_seconds)
        self._lock = DataDirLock(config.data_dir)
        #: Called with each persistent topic loaded and each namespace whose policies changed:
        #: geo-replication (magnetar.replication, a layer above) attaches its replicators.
        self.replication_listeners: list[Callable[[], None]] = []
        #: Called with each persistent topic loaded (created or opened again): the MQTT handler
        #: subscribes its wildcard subscriptions to the new topics that match (broker/mqtt).
        self.topic_listeners: list[Callable[[PersistentTopic], None]] = []
        #: Servers of other protocols on this broker (MQTT), closed with the Pulsar ones.
        self.protocol_servers: list[ProtocolServer] = []
        #: The MQTT port as bound; None while MQTT is off (mqtt_port); the MQTT-over-TLS one (mqtts_port).
        self.mqtt_port: int | None = None
        self.mqtts_port: int | None = None
        #: Called when bundles lost their owner (bundles_moved): geo-replication loads the
        #: replicated topics of the bundles this broker then owns.
        self.ownership_listeners: list[Callable[[], None]] = []
        #: When each loaded topic was last seen in use: idle ones are unloaded (inactive_topics.py).
        self.inactive_topics = InactiveTopics()
        #: One topic's broadcast consumers on every worker: spread topics and followers (spread.py).
        self.spread = Spread(
            config,
            self._ownership,
            self._ownership_shared,
            lambda: self.resources.storage,
            self.owner_of,
            lambda: self.namespace_service.broker_id,
            lambda: self.loader.executor,
            lambda name: partial(self.namespaces.policies, name.namespace_name),
        )
        self._offloads: Offloads | None = None

    def _flow_control(self, config: BrokerConfig) -> None:
        """What connections share: the read buffer, the publish buffer, room for large frames."""
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

    def _security(self, setup: BrokerSetup) -> None:
        """Authentication (as start-up built it), authorization, and their counts for /metrics."""
        config = setup.config
        #: The authentication providers, None while authentication is off (authentication.py).
        self.authentication = setup.authentication
        #: A worker's secret shared with the other workers, which it seals an HTTP client's
        #: credentials with at their Pulsar ports (and takes them sealed); None alone.
        self.worker_secret: WorkerSecret | None = None
        #: Opens a Pulsar session to another worker with a client's credentials (set by the layer
        #: above: the WebSocket layer's ``LocalSession.to_owner``), for MQTT on topics another
        #: worker owns (``broker/mqtt/remote.py``); None alone.
        self.owner_sessions: Callable[[BrokerInfo, Relayed], Awaitable[Any]] | None = None
        #: Called with each change another broker published that the service itself does not
        #: apply (``mqtt-topic/...``: broker/mqtt/server.py).
        self.change_listeners: list[Callable[[str], None]] = []
        #: Applies the changes other brokers published since the last look, now (between the
        #: looks every POLICY_POLL_SECONDS); None alone.
        self.poll_changes: Callable[[], None] | None = None
        if self.worker is not None:
            self.worker_secret = worker_credentials.install(self.authentication, config.data_dir)
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
        #: SENDs not stored, by the error answered (or ``StorageRefused``: closed producer) (/metrics).
        self.send_refusals: Counter[str] = Counter()

    # -- what start opens (resources.py, topic_catalog.py, topic_loader.py) -----------------
    @property
    def resources(self) -> BrokerResources:
        """Storage and the registries in its metadata store; BrokerNotStarted before ``start``."""
        if self._resources is None:
            raise BrokerNotStarted("the broker is not started: its storage is not open")
        return self._resources

    @property
    def storage(self) -> Storage:
        return self.resources.storage

    @property
    def namespaces(self) -> NamespaceRegistry:
        return self.resources.namespaces

    @property
    def clusters(self) -> ClusterRegistry:
        return self.resources.clusters

    @property
    def topic_replication(self) -> TopicReplication:
        return self.resources.topic_replication

    @property
    def schemas(self) -> SchemaRegistry:
        return self.resources.schemas

    @property
    def offloads(self) -> Offloads:
        """Tiered storage's offloads (offloads.py), made at start."""
        if self._offloads is None:
            raise BrokerNotStarted("the broker is not started")
        return self._offloads

    @property
    def namespace_service(self) -> NamespaceService:
        """Bundles and their owners (namespace_service.py)."""
        if self._namespace_service is None:
            raise BrokerNotStarted("the broker is not started")
        return self._namespace_service

    def join(self, web_url: str | None = None, web_url_tls: str | None = None) -> None:
        """Join the brokers that own bundles, named by this broker's own URLs (once every port is
        bound: the HTTP ports are the admin server's, bound after the broker's)."""
        port = self.port if self.port is not None else self.tls_port
        broker_id = self.worker.broker_id if self.worker is not None else f"{self.config.host}:{port}"
        me = BrokerInfo(broker_id, self.service_url, self.service_url_tls, web_url, web_url_tls)
        self.namespace_service.register(me)

    @property
    def shares_bundles(self) -> bool:
        """Whether other brokers (workers) own bundles too: a store of owners is shared."""
        return self._ownership_shared

    def owner_of(self, topic: TopicName) -> BrokerInfo | None:
        """The broker (worker) that serves ``topic``; None: this one, alone (no bundle owners
        are kept, and a LOOKUP is answered as before there were workers)."""
        if not self._ownership_shared:
            return None
        return self.namespace_service.lookup(topic)

    def serves(self, topic: TopicName) -> bool:
        """Whether this broker owns ``topic``'s bundle (alone, it owns every bundle)."""
        return not self._ownership_shared or self.namespace_service.is_served_here(topic)

    def check_served_here(self, topic: TopicName) -> None:
        """ServiceNotReady (Pulsar's words) unless this broker owns ``topic``'s bundle."""
        if self._ownership_shared:
            self.namespace_service.check_served_here(topic)

    @property
    def catalog(self) -> TopicCatalog:
        """Which topics there are, may one be created, partitioned topics (topic_catalog.py)."""
        if self._catalog is None:
            raise BrokerNotStarted("the broker is not started: no topic can be looked up")
        return self._catalog

    @property
    def loader(self) -> TopicLoader:
        """Opens topics, on the open threads where the command can wait (topic_loader.py)."""
        if self._loader is None:
            raise BrokerNotStarted("the broker is not started: no topic can be opened")
        return self._loader

    def _open_resources(self, storage: Storage) -> None:
        config = self.config
        resources = self._resources = BrokerResources.open(
            storage, config.cluster_name, config.default_number_of_namespace_bundles
        )
        resources.namespaces.changed = self._ownership.publish_change
        resources.schemas.changed = self._ownership.publish_change
        self._namespace_service = NamespaceService(
            resources.namespaces,
            self._ownership,
            lambda bundle: self.catalog.unload_bundle(bundle),
            self._close_bundle_topics,
        )
        auto_creation = AutoTopicCreation(
            allow_auto_topic_creation=config.allow_auto_topic_creation,
            topic_type=config.auto_topic_creation_type,
            default_num_partitions=config.default_num_partitions,
        )
        shared = self._namespace_service.topic_loaded if self._ownership_shared else _nothing
        catalog = TopicCatalog(
            self.topics, resources, self.limits, auto_creation, self.replication_changed, shared
        )
        self._catalog = catalog
        self._loader = TopicLoader(
            self.topics,
            resources,
            catalog,
            config,
            self._interceptors,
            self._topic_loaded,
            check_owned=self.check_served_here,
            nonpersistent_loaded=shared,
        )

    async def _close_bundle_topics(self, bundle: NamespaceBundle) -> int:
        """A bundle's unload: its loaded topics let go on the loop, their storage closed on the
        loader's close threads (a bundle of thousands of topics: seconds of fsyncs and commits
        that would stall every client); done when every close is. The topics let go."""
        catalog, loader = self.catalog, self.loader
        doomed = catalog.bundle_topics(bundle)
        closes = [closing for topic in doomed if (closing := loader.unload(topic)) is not None]
        if doomed:
            catalog.topics_changed()  # their replicators stop
        if closes:
            await asyncio.wait(closes)  # a failed close is logged (TopicLoader._closed)
        return len(doomed)

    def _topic_loaded(self, topic: PersistentTopic) -> None:
        self.open_replication_cursors(topic)
        self.prepare_compaction(topic)
        self.replication_changed()
        for listener in list(self.topic_listeners):
            try:
                listener(topic)
            except Exception:
                log.exception("%s: a topic listener failed", topic.name)

    def _hold_all(self, reason: int) -> None:
        log.debug("publish buffer over %d bytes: not reading any connection", self.publish_buffer.limit)
        for cnx in self.connections:
            cnx.holds.hold(reason)

    def _release_all(self, reason: int) -> None:
        for cnx in list(self.connections):
            cnx.holds.release(reason)

    def frame_room_released(self, cnx: FrameReceiver) -> None:
        """``cnx`` gives back its room for a large frame (or leaves the line): let the next ones in."""
        frame_room.release(self.frame_budget, cnx)

    def frame_budget_full(self, cnx: FrameReceiver, size: int) -> None:
        frame_room.warn_full(self.frame_budget, cnx, size, self.config.incomplete_frame_timeout_seconds)

    @property
    def service_url(self) -> str | None:
        """pulsar:// address given in LOOKUP answers; None while the plain port is off
        (``broker_service_port_enabled``): an answer names only ports that are served."""
        if self.port is None:
            return None
        if self.config.advertised_address:
            if self.worker is not None:  # the worker's own port at the advertised host
                return f"pulsar://{self._advertised_host()}:{self.port}"
            return self.config.advertised_address
        return f"pulsar://{self.config.host}:{self.port}"

    @property
    def service_url_tls(self) -> str | None:
        """pulsar+ssl:// address given in LOOKUP answers (clients on TLS connect there); None without TLS."""
        if self.tls_port is None:
            return None
        return f"pulsar+ssl://{self._advertised_host()}:{self.tls_port}"

    @property
    def shared_service_urls(self) -> tuple[str | None, str | None]:
        """The pulsar:// and pulsar+ssl:// addresses every worker listens on (the advertised ports,
        shared): what a LOOKUP of a spread topic names (spread.py). Alone, its own."""
        if self.worker is None:
            return self.service_url, self.service_url_tls
        url = tls_url = None
        if self.port is not None:
            url = self.config.advertised_address or f"pulsar://{self._advertised_host()}:{self.config.port}"
        if self.tls_port is not None:
            tls_url = f"pulsar+ssl://{self._advertised_host()}:{self.config.broker_service_port_tls}"
        return url, tls_url

    @property
    def shared_web_urls(self) -> tuple[str | None, str | None]:
        """The http:// and https:// addresses of the one admin port every worker listens on (the
        advertised HTTP ports, shared): what the HTTP lookup of a spread topic names as its
        ``httpUrl`` (spread.py). None for a port not served."""
        config = self.config
        host = self._advertised_host()
        http = f"http://{host}:{config.http_port}" if config.web_service_port_enabled else None
        tls_port = config.web_service_port_tls
        return http, (f"https://{host}:{tls_port}" if tls_port is not None else None)

    def _advertised_host(self) -> str:
        """The host of ``advertised_address`` when set, else ``host``."""
        host = self.config.host
        if self.config.advertised_address:
            host = urllib.parse.urlsplit(self.config.advertised_address).hostname or host
        return host

    async def start(self, new_cnx: Callable[[], asyncio.BaseProtocol]) -> None:
        """Open storage, bind the ports (each connection accepted made by ``new_cnx``:
        ``server.channel_initializer``), start the background work."""
        loop = asyncio.get_running_loop()
        # Certificate problems are found before anything else starts (TlsConfigError).
        ssl_context = tls.server_context(self.config) if tls.tls_enabled(self.config) else None
        self.ssl_context = ssl_context
        if self.worker is None:  # a worker's supervisor holds it for all of them
            self._lock.acquire()
        passes = loop_pass.for_loop(loop)
        settings = self.config.offload_settings()
        offloader = LedgerOffloader(settings) if settings is not None else None
        storage = Storage(
            self.config.storage_config(),
            notify=_notifier(loop, passes),
            defer=lambda callback: passes.defer(loop_pass.SYNC, callback),
            check_directories=self.worker is None,
            object_reader=offloader.io if offloader is not None else None,
        )
        #: Tiered storage: offloads by threshold and by the admin API (offloads.py).
        self._offloads = Offloads(offloader, storage.metadata, self.offload_policies)
        if offloader is not None:
            log.info("tiered storage: closed ledgers are offloaded to %s", offloader.settings.describe())
        # Descriptors are the process's: a broker's storage sets the bound for every ledger.
        ledger_files.set_open_limit(descriptors.ledger_file_limit(self.config.max_open_ledger_files))
        self._open_resources(storage)
        if self.config.broker_service_port_enabled:
            self._server = await self._listen(
                self.config.port, new_cnx, "the Pulsar port", "binary protocol port (--port)"
            )
            self.port = self._server.port
        if (tls_port := self.config.broker_service_port_tls) is not None:
            self._tls_server = await self._listen(
                tls_port,
                new_cnx,
                "the Pulsar TLS port",
                "TLS port (broker_service_port_tls)",
                tls=ssl_context,
                handshake_timeout=tls.HANDSHAKE_TIMEOUT_S,
            )
            self.tls_port = self._tls_server.port
        self.join()  # named without HTTP URLs until the admin server says them (Standalone)
        self.spread.refresh()
        self._tasks = [
            asyncio.create_task(housekeeping.every(seconds, action)) for seconds, action in self._background()
        ]

    async def _listen(
        self, port: int, new_cnx: Callable[[], asyncio.BaseProtocol], name: str, setting: str, **tls_args: Any
    ) -> Listener:
        """Accept on ``port``; the listener whose port LOOKUP answers name. A worker listens on
        ``port`` with the other workers (SO_REUSEPORT) and answers with a port of its own."""
        host, refusal = self.config.host, PULSAR_OUT_OF_DESCRIPTORS
        if self.worker is None:
            return await listen(host, port, new_cnx, refusal, name, setting, **tls_args)
        shared = await listen(host, port, new_cnx, refusal, name, setting, reuse_port=True, **tls_args)
        self._shared_servers.append(shared)
        return await listen(
            host, 0, new_cnx, refusal, f"{name} of {self.worker.broker_id}", setting, **tls_args
        )

    def _background(self) -> list[tuple[float, housekeeping.Action]]:
        """The background work and how often it runs (housekeeping.py, frame_room.py)."""
        config, topics, namespaces = self.config, self.topics, self.namespaces
        timeout = config.incomplete_frame_timeout_seconds
        lag_limits = LagLimits(config.broadcast_max_lag_messages, config.broadcast_max_lag_seconds)
        work: list[tuple[float, housekeeping.Action]] = [
            (config.cursor_flush_interval_seconds, partial(housekeeping.flush_all, topics)),
            (config.retention_check_interval_seconds, partial(housekeeping.trim_all, topics, namespaces)),
            (
                config.message_expiry_check_interval_seconds,
                partial(housekeeping.expire_messages, topics, namespaces),
            ),
            (config.stats_update_frequency_seconds, partial(housekeeping.update_rates, topics)),
            (config.backlog_quota_check_interval_seconds, partial(housekeeping.check_backlog_quotas, topics)),
            (
                config.broadcast_lag_check_interval_seconds,
                partial(housekeeping.sweep_broadcast, topics, lag_limits),
            ),
            (min(1.0, timeout / 4), partial(frame_room.close_stalled, self.frame_budget, timeout)),
            (config.broker_delete_inactive_topics_frequency_seconds, self.check_inactive_topics),
            (
                config.managed_ledger_offload_check_interval_seconds,
                partial(housekeeping.offload_all, topics, self.offloads),
            ),
            (config.broker_service_compaction_monitor_interval_in_seconds, self.check_compaction),
        ]
        if self.authentication is not None:
            work.append((config.authentication_refresh_check_seconds, self.check_credentials))
        if self.keepalive.enabled:
            work.append((self.keepalive.turn_seconds, self.turn_keepalive))
        if self._ownership_shared:  # other workers own bundles and change policies too
            service = self.namespace_service
            work.append((OWNERSHIP_RENEW_SECONDS, service.keep_alive))
            poll = partial(
                service.poll_changes,
                self.policies_changed,
                self.schemas.forget,
                self.bundles_moved,
                self.spread.refresh,
                self.other_change,
            )
            work.append((POLICY_POLL_SECONDS, poll))
            self.poll_changes = poll
        if self.spread.active:
            work.append((config.cursor_flush_interval_seconds, self.spread.flush))
            work.append((SPREAD_SWEEP_SECONDS, self.spread.sweep))
            work.append((config.stats_update_frequency_seconds, self.spread.update_rates))
            sweep_lag = partial(self.spread.sweep_lag, lag_limits)
            work.append((config.broadcast_lag_check_interval_seconds, sweep_lag))
        return work

    def check_inactive_topics(self) -> Iterator[None]:
        """Delete the unused topics the inactive-topic policies say to; unload the others nobody
        has used for ``broker_unload_inactive_topics_seconds``. A slice of topics at a time
        (``housekeeping.every`` runs the loop between them)."""
        gone = yield from self.inactive_topics.sweeping(
            self.topics,
            time.monotonic,
            self.config.broker_unload_inactive_topics_seconds,
            self.loader.unload,
            self.catalog.topics_changed,
            lambda topic: self.inactive_topic_policies(topic.name),
            self._delete_inactive,
        )
        if gone and memory.trims():  # their memory back to the system, once their closes are done
            self.loader.after_closes(memory.give_back)

    def offload_policies(self, name: TopicName) -> OffloadPolicies:
        """The offload threshold and deletion lag that apply to ``name`` (offload_policies.py)."""
        namespace = self.namespaces.policies(name.namespace_name)
        return offload_policies.applied(
            self.resources.topic_offload_policies.get(name),
            namespace.offload_policies,
            namespace.offload_threshold,
            namespace.offload_deletion_lag_ms,
            self.config.offload_policies(),
            namespace.offload_threshold_in_seconds,
        )

    def check_compaction(self) -> Iterator[None]:
        """Compact the loaded topics past their compaction threshold (housekeeping.check_compaction):
        the topics' own thresholds read once for the pass."""
        own = self.resources.topic_compaction_thresholds.all()
        return housekeeping.check_compaction(
            self.topics, lambda name: self.compaction_threshold(name, own), self.compaction_executor
        )

    def compaction_threshold(self, name: TopicName, own: dict[str, int] | None = None) -> int:
        """What applies to ``name``: the topic's own compaction threshold (from ``own`` when
        given: all of them, read at once), else its namespace's, else the broker's."""
        if own is None:
            mine = self.resources.topic_compaction_thresholds.get(name)
        else:
            mine = own.get(TopicCompactionThresholds.name_of(name))
        try:
            namespace = self.namespaces.policies(name.namespace_name).compaction_threshold
        except TopicNotFound:  # the namespace was deleted meanwhile
            namespace = None
        return applied_threshold(mine, namespace, self.config.broker_service_compaction_threshold_in_bytes)

    def prepare_compaction(self, topic: PersistentTopic) -> None:
        """A topic with a compaction threshold gets its ``__compaction`` cursor (off the loop) as soon
        as it is loaded or the threshold set, as Pulsar's does: nothing is trimmed before it is
        compacted."""
        try:
            if self.compaction_threshold(topic.name) > 0:
                topic.compaction.make_cursor(self.loader.executor)
        except Exception:
            log.exception("%s: cannot prepare its compaction", topic.name)

    def inactive_topic_policies(self, name: TopicName) -> InactiveTopicPolicies:
        """What applies to ``name``: the topic's own policies, else its namespace's, else the broker's."""
        own = self.resources.topic_inactive_policies.get(name)
        if own is not None:
            return own
        namespace = self.namespaces.policies(name.namespace_name).inactive_topic_policies
        if namespace is not None:
            return InactiveTopicPolicies.from_json(namespace)
        return self.config.inactive_topic_policies()

    def _delete_inactive(self, topic: PersistentTopic | NonPersistentTopic) -> None:
        """Delete an unused topic as an inactive-topic policy says: closed on the loop (it is
        idle: nothing pending), then its storage deleted, as an admin DELETE does."""
        try:
            self.catalog.delete_topic(topic.name, changed=False)
        except Exception:
            log.exception("%s: deleting the inactive topic failed", topic.name)

    def policies_changed(self, namespace: str) -> None:
        """Another broker changed ``namespace``'s policies (``"*"``: maybe any namespace's): what
        a change made here does (admin/namespaces_api.py) is done here too."""
        if namespace == "*":
            for tenant in self.namespaces.tenants():
                for name in self.namespaces.namespaces(tenant):
                    self.policies_changed(name)
            return
        self.apply_policies(namespace)
        self.recheck_permissions(namespace)

    def turn_keepalive(self) -> None:
        """One turn of the keepalive wheel (a slot of the connections)."""
        self.keepalive.turn(asyncio.get_running_loop().time())

    def check_credentials(self) -> None:
        """Challenge connections whose credentials expired; close those that did not answer."""
        now = time.time()
        for cnx in list(self.connections):
            cnx.check_credentials(now)
        for other in self.protocol_servers:
            other.check_credentials(now)

    def stop_serving(self) -> None:
        """Stop accepting and close every connection: no SEND is taken while the rest of the
        process shuts down (replication, the HTTP server), so the clients know at once what was
        stored and what they must send again."""
        for server in (self._server, self._tls_server, *self._shared_servers):
            if server is not None:
                server.close()
        for other in self.protocol_servers:
            other.close()
        for cnx in list(self.connections):
            cnx.close()

    async def stop(self) -> None:
        """Stop serving, flush cursors and state, close storage."""
        for task in self._tasks:
            task.cancel()
        self.stop_serving()
        self.spread.close()
        if self._namespace_service is not None and self._namespace_service.me is not None:
            self._namespace_service.unregister()
        self._listing.shutdown(wait=True, cancel_futures=True)
        for topic in list(self.topics.values()):  # a compaction under way stops at its next check
            if isinstance(topic, PersistentTopic):
                topic.compaction.stop()
        self.compaction_executor.shutdown(wait=True, cancel_futures=True)
        if self._loader is not None:  # opens and unloads under way finish before storage closes
            self._loader.executor.shutdown(wait=True)
            self._loader.closer.shutdown(wait=True)
        # Let receipts already on their way out reach the clients.
        await asyncio.sleep(0)
        if self._offloads is not None:  # uploads under way are given up while their topics are open
            self._offloads.close()
        for topic in list(self.topics.values()):
            try:
                topic.close()
            except Exception:
                log.exception("closing topic %s failed", topic.name)
        self.topics.clear()
        if self._resources is not None:
            self._resources.storage.close()
        if self._loader is not None:
            self._loader.storage_closed = True
        if self.worker is None:
            self._lock.release()

    # -- topics (topic_loader.py, topic_catalog.py) ---------------------------------------
    def get_topic(self, name: TopicName, create: bool = True) -> PersistentTopic | NonPersistentTopic:
        return self.loader.get(name, create)

    def preparing(
        self, name: TopicName, subscription: tuple[str, str] | None = None
    ) -> asyncio.Future | None:
        """Open the persistent topic ``name`` (and create its durable ``subscription``) on the open
        threads; None when there is nothing to do (``TopicLoader.preparing``)."""
        return self.loader.preparing(name, subscription)

    def replication_clusters_of(self, name: TopicName) -> list[str]:
        """The remote clusters ``name`` replicates to (replication.effective_clusters)."""
        namespace = self.namespaces.policies(name.namespace_name).replication_clusters
        override = self.topic_replication.get(name)
        return effective_clusters(override, namespace, self.config.cluster_name)

    def check_namespace(self, name: TopicName) -> None:
        self.catalog.check_namespace(name)

    def auto_topic_creation(self, namespace: str) -> AutoTopicCreation:
        return self.catalog.auto_topic_creation(namespace)

    def check_topic_count(self, namespace: str, new: int) -> None:
        self.catalog.check_topic_count(namespace, new)

    def partitions_of(self, name: TopicName, auto_create: bool = True) -> int:
        return self.catalog.partitions_of(name, auto_create)

    def create_partitioned_topic(self, name: TopicName, count: int) -> None:
        self.catalog.create_partitioned_topic(name, count)

    def update_partitioned_topic(self, name: TopicName, count: int) -> None:
        self.catalog.update_partitioned_topic(name, count)

    def delete_partitioned_topic(self, name: TopicName) -> None:
        self.catalog.delete_partitioned_topic(name)

    def create_topic(self, name: TopicName) -> None:
        self.catalog.check_new_topic(name)
        self.get_topic(name, create=True)

    def delete_topic(self, name: TopicName) -> None:
        self.loader.settle(str(name))  # an unload closing its files first
        self.catalog.delete_topic(name)

    def topics_of_namespace(self, namespace: str) -> list[str]:
        return self.catalog.topics_of_namespace(namespace)

    def topic_list(self, namespace: str, mode: int = 0) -> list[str]:
        return self.catalog.topic_list(namespace, mode)

    def listing_topics(
        self, namespace: str, mode: int | None, then: Callable[[list[str]], T]
    ) -> asyncio.Future[T]:
        """The topics of ``namespace`` (``topic_list`` in ``mode``; all, as the admin lists, for
        None), and ``then`` of them, worked out on the listing thread: a namespace of 100,000
        topics is read, sorted and answered there while the loop serves everyone else. An unknown
        namespace raises here; the loaded topics' names are taken here, on the loop."""
        self.namespaces.policies(namespace)
        catalog, loaded = self.catalog, list(self.topics)
        shared = self._namespace_service if self._ownership_shared else None

        def work() -> T:
            if shared is not None:  # other workers' non-persistent topics exist only there
                loaded.extend(shared.nonpersistent_topics(namespace))
            if mode is None:
                topics = catalog.topics_of_namespace(namespace, loaded)
            else:
                topics = catalog.topic_list(namespace, mode, loaded)
            return then(topics)

        return asyncio.get_running_loop().run_in_executor(self._listing, work)

    def apply_policies(self, namespace: str) -> None:
        """Policies are read when used; nothing is cached that would need refreshing, but a change
        of replication clusters opens the new remotes' cursors at once (a message published
        next is replicated) and tells the replication layer, and a compaction threshold set makes
        the topics' ``__compaction`` cursors."""
        for topic in list(self.topics.values()):
            if isinstance(topic, PersistentTopic) and topic.name.namespace_name == namespace:
                self.open_replication_cursors(topic)
                self.prepare_compaction(topic)
        self.replication_changed()

    def open_replication_cursors(self, topic: PersistentTopic) -> None:
        """The cursor of each remote cluster ``topic`` replicates to, made before any message is
        published to it (on load and on a policy change): nothing is missed while the
        replicator itself starts."""
        try:
            remotes = self.replication_clusters_of(topic.name)
            if remotes:
                topic.open_replication_cursors(remotes)
        except Exception:
            log.exception("%s: cannot open its replication cursors", topic.name)

    def bundles_moved(self) -> None:
        """Bundles lost their owner (another worker unloaded them, or died): whoever must serve
        topics nobody asks for (geo-replication's) looks again."""
        for listener in list(self.ownership_listeners):
            listener()

    def other_change(self, path: str) -> None:
        for listener in list(self.change_listeners):
            listener(path)

    def replication_changed(self) -> None:
        for listener in list(self.replication_listeners):
            listener()

    def recheck_permissions(self, namespace: str) -> None:
        """After the namespace's grants changed, close the producers and consumers whose role lost
        its permission, as Pulsar's ``Producer/Consumer.checkPermissionsAsync`` on a policies update:
        the client reconnects and is then refused with AuthorizationError."""
        authz = self.authorization
        if authz is None:
            return
        for cnx in list(self.connections):
            if cnx.worker is not None:
                continue  # one of this broker's workers: no grant names it (worker_access.py)
            for producer in list(cnx.producers.values()):
                topic = producer.topic.name
                if topic.namespace_name == namespace and not authz.can_topic(topic, cnx.role, PRODUCE):
                    log.info("%r is not allowed to produce on %s anymore: producer closed", cnx.role, topic)
                    producer.close_by_broker()
            for consumer in list(cnx.consumers.values()):
                topic = consumer.subscription.topic.name
                if topic.namespace_name == namespace and not authz.can_topic(topic, cnx.role, CONSUME):
                    log.info("%r is not allowed to consume from %s anymore: consumer closed", cnx.role, topic)
                    consumer.disconnect()
        for other in self.protocol_servers:
            other.recheck_permissions(namespace)


class ProtocolServer(Protocol):
    """Another protocol's server on this broker (broker/mqtt's): stops accepting and closes its
    connections when the broker stops serving; applies expired credentials and revoked grants
    to its connections as the Pulsar port does."""

    def close(self) -> None: ...

    def check_credentials(self, now: float) -> None: ...

    def recheck_permissions(self, namespace: str) -> None: ...


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


def _nothing(key: str, loaded: bool) -> None:
    """A broker alone: its loaded topics are all there are, nobody else lists them."""
