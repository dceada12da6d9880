"""Broker settings: one model, every field with its type, range and documented default
(docs/configuration.md).

A pydantic dataclass in strict mode: a value of the wrong type (``port = "6650"``,
``deduplication_enabled = "false"``) or out of its range is refused naming the setting, never
converted into something else. The storage settings take their types and defaults from
``storage/config.py``'s ``StorageConfig``, so they are written once. Whether the settings can
work together (TLS files, authentication keys, interceptors) is checked at start-up
(``startup.py``, which calls ``validate()`` for the checks that need no other module).

Settings come from defaults, then an optional TOML file (flat keys, same names), then
``MAGNETAR_<NAME>`` environment variables, then command-line flags — later wins
(``config_sources.py`` reads the sources and says where each value came from).
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError
from pydantic.dataclasses import dataclass

from magnetar.broker import backlog_quota, config_sources
from magnetar.broker.compaction_pause import Step as CompactionStep
from magnetar.broker.config_sources import ConfigError
from magnetar.broker.inactive_topic_policies import NO_SUBSCRIPTIONS, DeleteMode, InactiveTopicPolicies
from magnetar.broker.offload_policies import OffloadPolicies
from magnetar.offload.settings import OffloadSettings
from magnetar.protocol.mqtt.codes import MAX_PACKET_SIZE as MQTT_MAX_PACKET_SIZE
from magnetar.storage.config import (
    MIB,
    STRICT,
    Directory,
    FsyncPolicy,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    PreallocateBytes,
    StorageConfig,
)

#: A TCP port; 0 picks a free one.
Port = Annotated[int, Field(ge=0, le=65535)]
#: ``http_port`` when only ``port`` is set: ``port`` + this (6650 -> 8080, the defaults' pair).
HTTP_PORT_OFFSET = 8080 - 6650
#: How many broker processes (workers) serve: a count, or "auto" for one per usable core.
Workers = Annotated[int, Field(ge=1, le=1024)] | Literal["auto"]
#: A backlog quota's limit: -1 for none.
QuotaLimit = Annotated[int, Field(ge=-1)]
#: The storage settings a broker passes on (all of StorageConfig's but data_dir and the internal ones).
STORAGE_SETTINGS = (
    "fsync_policy",
    "fsync_interval_ms",
    "fsync_inline_max_ms",
    "preallocate_bytes",
    "min_free_disk_bytes",
    "max_ledger_size_bytes",
    "max_ledger_age_seconds",
    "retention_time_seconds",
    "retention_size_bytes",
    "entry_cache_bytes",
    "max_individual_ack_cache_bytes_per_cursor",
)
#: Tiered storage's read settings: the broker's name -> StorageConfig's.
OFFLOAD_READ_SETTINGS = {
    "managed_ledger_offload_read_cache_bytes": "offload_read_cache_bytes",
    "managed_ledger_offload_read_buffer_size_in_bytes": "offload_read_block_bytes",
    "managed_ledger_offload_prefetch_rounds": "offload_prefetch_blocks",
    "managed_ledger_offload_read_retry_seconds": "offload_read_retry_seconds",
    "managed_ledger_offload_read_timeout_seconds": "offload_read_timeout_seconds",
}
#: The storage layer's defaults, as its settings model holds them (data_dir aside).
_STORAGE_DEFAULTS = StorageConfig(data_dir=Path("./data"))
#: The settings of broker/limits.py (0: no limit).
LIMIT_SETTINGS = (
    "broker_max_connections",
    "broker_max_connections_per_ip",
    "max_producers_per_topic",
    "max_consumers_per_topic",
    "max_consumers_per_subscription",
    "max_producers_per_connection",
    "max_consumers_per_connection",
    "max_topics_per_namespace",
)


@dataclass(config=STRICT)
class BrokerConfig:
    # Where clients connect.
    host: str = "127.0.0.1"
    port: Port = 6650
    http_port: Port = 8080
    #: Address handed to clients in LOOKUP answers; defaults to pulsar://host:port as bound.
    advertised_address: str | None = None
    data_dir: Directory = Path("./data")
    #: This broker's cluster, as Pulsar's clusterName (standalone's is "standalone"): what the
    #: admin API's clusters list names, and what geo-replication will call this side.
    cluster_name: str = "standalone"

    #: Serve the plain binary protocol on ``port``. Off: pulsar+ssl:// only (Pulsar expresses this
    #: by an empty brokerServicePort); broker_service_port_tls must then be set.
    broker_service_port_enabled: bool = True
    #: Serve plain HTTP on ``http_port``. Off: HTTPS only (Pulsar: an empty webServicePort);
    #: web_service_port_tls must then be set.
    web_service_port_enabled: bool = True
    #: Pulsar's webSocketServiceEnabled: the WebSocket API (``/ws/v2/...``, docs/websocket.md) on
    #: the HTTP port(s). On, as in Pulsar's standalone: it is served under the same authentication
    #: and authorization as the binary port, so it opens nothing that port does not.
    web_socket_service_enabled: bool = True
    #: Pulsar's webSocketMaxTextFrameSize: the largest text frame a WebSocket client may send.
    #: Unset: room for a message of max_message_size, base64 in its JSON.
    web_socket_max_text_frame_size: PositiveInt | None = None
    #: The web console at ``/console`` on the HTTP port(s) (docs/console.md): its page, and the
    #: admin paths it reads under ``/admin/v2/console/``, behind the admin API's authentication.
    web_console_enabled: bool = True

    # TLS (broker/tls.py, docs/configuration.md): off unless a TLS port is set.
    #: Pulsar's brokerServicePortTls: pulsar+ssl:// on this port (beside the plain one, unless
    #: broker_service_port_enabled is off); 0 picks a free one.
    broker_service_port_tls: int | None = None
    #: Pulsar's webServicePortTls: HTTPS for the admin API and /metrics, beside plain HTTP.
    web_service_port_tls: int | None = None
    #: The broker's certificate (chain) and its unencrypted private key, PEM files.
    tls_certificate_file_path: str | None = None
    tls_key_file_path: str | None = None
    #: CA certificates (PEM) that client certificates are checked against.
    tls_trust_certs_file_path: str | None = None
    #: Refuse the handshake of a client without a certificate signed by a trusted CA (mutual TLS).
    tls_require_trusted_client_cert_on_connect: bool = False
    #: Ask clients for no certificate at all (none is then checked, nor used to authenticate).
    tls_allow_insecure_connection: bool = False
    #: Protocol versions offered, e.g. ["TLSv1.3", "TLSv1.2"]; empty: OpenSSL's defaults.
    tls_protocols: list[str] = field(default_factory=list)
    #: TLS 1.2 cipher suites in OpenSSL's names (e.g. "ECDHE-RSA-AES256-GCM-SHA384"); empty: defaults.
    tls_ciphers: list[str] = field(default_factory=list)

    # MQTT (docs/mqtt.md; Pulsar's MQTT handler's names where it has the setting).
    #: MQTT 3.1.1 and 5.0 on this port (1883 is the usual one); None: off. 0 picks a free one.
    mqtt_port: Port | None = None
    #: MQTT over TLS on this port (8883 is the usual one, MoP's ``mqtt+ssl://`` listener), with the
    #: broker's TLS settings (tls_certificate_file_path ...); None: off. 0 picks a free one.
    mqtts_port: Port | None = None
    #: MoP's defaultTenant and defaultNamespace: an MQTT Topic Name ``a/b`` is the topic
    #: ``persistent://{tenant}/{namespace}/a%2Fb``.
    mqtt_default_tenant: str = "public"
    mqtt_default_namespace: str = "default"
    #: MoP's mqttMessageMaxLength: the largest MQTT packet taken (5.0 clients are told it as the
    #: Maximum Packet Size); a message above max_message_size is stored in chunks (PIP 37).
    #: At most 268435460 bytes, MQTT's own limit.
    mqtt_message_max_length: PositiveInt = 64 * MIB
    #: CONNECTs a second one client address may make (as many at once); more are refused with
    #: CONNACK 0x9F / 3 (broker/mqtt/floods.py). 0: no limit, as the other limits.
    mqtt_max_connect_rate_per_ip: NonNegativeFloat = 0.0

    # Protocol.
    max_message_size: PositiveInt = 5 * MIB
    #: Most messages one batch may hold; a SEND of a batch with more (or whose structure does not
    #: add up) is refused with SEND_ERROR. Ten times the official clients' default
    #: (``batchingMaxMessages`` = 1000); it also bounds the broker's check of one batch.
    max_messages_per_batch: PositiveInt = 10_000
    #: Check each batch's structure at SEND (``protocol/batch.check_message``). Off: batches are
    #: stored unchecked, as Pulsar's broker stores them; only where every producer is trusted.
    validate_batches_on_publish: bool = True
    #: The broker PINGs idle connections this often; 0: off.
    keepalive_interval_seconds: NonNegativeFloat = 30.0
    #: Messages a dispatcher reads from storage in one go.
    dispatcher_max_read_batch: PositiveInt = 100
    #: How long a broadcast consumer whose connection was lost keeps its virtual cursor, detached
    #: (it goes on holding the subscription's messages): a consumer of the same name
    #: subscribing within it resumes there. 0: it is given up at once.
    broadcast_reconnect_grace_seconds: NonNegativeFloat = 60.0
    #: The broadcast lag policy (docs/topics-and-subscriptions.md): a broadcast consumer with more
    #: than this many messages (entries, as msgBacklog counts them) left to acknowledge is closed
    #: and its virtual cursor given up. 0: off.
    broadcast_max_lag_messages: NonNegativeInt = 0
    #: The same for a consumer that has not acknowledged a message older than this. 0: off.
    broadcast_max_lag_seconds: NonNegativeFloat = 0.0
    #: How often the lag policy is checked (and the coarse clock of last-ack times ticks).
    broadcast_lag_check_interval_seconds: PositiveFloat = 1.0
    #: With several workers, the broadcast consumers of one topic are served by whichever worker
    #: their connection reached, not all by the topic's owner (docs/architecture.md, the spread).
    broadcast_spread: bool = True

    # Flow control (docs/configuration.md): a connection is not read while these are reached.
    #: Sends of one connection awaiting their receipts; read again at half. 0: no limit.
    max_pending_publish_requests_per_connection: NonNegativeInt = 1000
    #: Bytes of the sends awaiting receipts on all connections; read again at half. 0: no limit.
    max_message_publish_buffer_bytes: NonNegativeInt = 256 * MIB
    #: Bytes of large frames being received on all connections (each takes a buffer of its
    #: declared size): one beyond it waits, unread, for room. 0: no limit.
    max_incomplete_frame_bytes: NonNegativeInt = 128 * MIB
    #: A large frame incomplete for this long while others wait for room: its connection is closed.
    incomplete_frame_timeout_seconds: PositiveFloat = 10.0

    # Limits (docs/configuration.md, Limits; broker/limits.py). 0: no limit, as Pulsar's defaults.
    #: Pulsar's brokerMaxConnections: connections open at once; one more is refused (NotAllowedError).
    broker_max_connections: NonNegativeInt = 0
    #: Pulsar's brokerMaxConnectionsPerIp: connections open at once from one client IP address.
    broker_max_connections_per_ip: NonNegativeInt = 0
    #: Pulsar's maxProducersPerTopic (a namespace's max_producers_per_topic overrides it): ProducerBusy.
    max_producers_per_topic: NonNegativeInt = 0
    #: Pulsar's maxConsumersPerTopic, all subscriptions together (namespaces may override): ConsumerBusy.
    max_consumers_per_topic: NonNegativeInt = 0
    #: Pulsar's maxConsumersPerSubscription (namespaces may override): ConsumerBusy.
    max_consumers_per_subscription: NonNegativeInt = 0
    #: Producers one connection may have open (no Pulsar setting): ProducerBusy.
    max_producers_per_connection: NonNegativeInt = 0
    #: Consumers one connection may have open (no Pulsar setting): ConsumerBusy.
    max_consumers_per_connection: NonNegativeInt = 0
    #: Pulsar's maxTopicsPerNamespace: persistent topics (each partition counts) in one namespace
    #: (a namespace's max_topics_per_namespace overrides it); one more is refused (NotAllowedError).
    max_topics_per_namespace: NonNegativeInt = 0

    # File descriptors (docs/configuration.md, File descriptors; storage/ledger_files.py).
    #: Files that ledgers (topics' and cursors') keep open, all together; past it the least recently
    #: used close theirs and reopen them when next written or read (BookKeeper's openFileLimit is
    #: the bookie's like bound). At most half the descriptor limit is used: the rest is for connections.
    max_open_ledger_files: Annotated[int, Field(ge=2)] = 2048

    # Namespace bundles (broker/bundles.py, docs/namespaces.md).
    #: Pulsar's defaultNumberOfNamespaceBundles: the bundles a namespace created without a
    #: ``bundles`` policy is cut into (and ``public/default``'s).
    default_number_of_namespace_bundles: PositiveInt = 4
    #: Broker processes on this machine (``magnetar standalone --workers``): 1 is one process, as
    #: before; more starts a supervisor and that many workers owning bundles (docs/architecture.md);
    #: ``"auto"``: one per core this process may use.
    workers: Workers = 1

    # Durability (see docs/storage.md; types and defaults are StorageConfig's).
    fsync_policy: FsyncPolicy = _STORAGE_DEFAULTS.fsync_policy
    fsync_interval_ms: NonNegativeFloat = _STORAGE_DEFAULTS.fsync_interval_ms
    #: ``always``: fsync on the event loop at the end of each pass while fsyncs average under
    #: this, on the fsync thread above it (a slow disk must not hold up dispatch); 0: the thread.
    fsync_inline_max_ms: NonNegativeFloat = _STORAGE_DEFAULTS.fsync_inline_max_ms
    #: Zeros written ahead of a ledger's end, so fsyncs of small appends skip the metadata commit.
    preallocate_bytes: PreallocateBytes = _STORAGE_DEFAULTS.preallocate_bytes
    #: Sends are refused while the data directory has less free space than this (0: only when
    #: the disk is actually full); writes resume by themselves once there is room again.
    min_free_disk_bytes: NonNegativeInt = _STORAGE_DEFAULTS.min_free_disk_bytes
    max_ledger_size_bytes: PositiveInt = _STORAGE_DEFAULTS.max_ledger_size_bytes
    max_ledger_age_seconds: PositiveFloat = _STORAGE_DEFAULTS.max_ledger_age_seconds
    retention_time_seconds: float = _STORAGE_DEFAULTS.retention_time_seconds
    retention_size_bytes: int = _STORAGE_DEFAULTS.retention_size_bytes
    entry_cache_bytes: NonNegativeInt = _STORAGE_DEFAULTS.entry_cache_bytes
    cursor_flush_interval_seconds: PositiveFloat = 1.0
    #: PIP 81: memory for one durable subscription's ack pages; the rest stay on disk until needed.
    max_individual_ack_cache_bytes_per_cursor: NonNegativeInt = (
        _STORAGE_DEFAULTS.max_individual_ack_cache_bytes_per_cursor
    )
    retention_check_interval_seconds: PositiveFloat = 60.0
    #: How often namespaces' message TTL is applied.
    message_expiry_check_interval_seconds: PositiveFloat = 60.0
    #: Pulsar's brokerDeleteInactiveTopicsEnabled: delete topics nobody uses, as the mode below
    #: allows. Pulsar's default is true; Magnetar's false (docs/configuration.md says why).
    broker_delete_inactive_topics_enabled: bool = False
    #: Pulsar's brokerDeleteInactiveTopicsMode: which unused topics may be deleted.
    broker_delete_inactive_topics_mode: DeleteMode = NO_SUBSCRIPTIONS
    #: Pulsar's brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: unused this long, a topic is
    #: deleted; unset: broker_delete_inactive_topics_frequency_seconds, as in Pulsar.
    broker_delete_inactive_topics_max_inactive_duration_seconds: PositiveFloat | None = None
    #: Pulsar's brokerDeleteInactiveTopicsFrequencySeconds: how often loaded topics are checked
    #: for use (idle ones unloaded, and deleted where an inactive-topic policy says so).
    broker_delete_inactive_topics_frequency_seconds: PositiveFloat = 60.0
    #: A loaded topic nobody has used this long is unloaded (its memory and files given back; the
    #: next use loads it again, its subscriptions where they were). 0: topics stay loaded.
    broker_unload_inactive_topics_seconds: NonNegativeFloat = 60.0
    #: How often the message and byte rates in topic stats and /metrics are worked out (each is
    #: the average over the interval just ended), as Pulsar's statsUpdateFrequencyInSecs.
    stats_update_frequency_seconds: PositiveFloat = 60.0
    #: Pulsar's exposeTopicLevelMetricsInPrometheus: /metrics has each loaded topic's series; false:
    #: one series per namespace, its topics' values summed (100,000 topics make a scrape huge).
    expose_topic_level_metrics_in_prometheus: bool = True
    #: Pulsar's enableBrokerSideSubscriptionPatternEvaluation: a GET_TOPICS_OF_NAMESPACE with a
    #: regex subscription's topics_pattern is answered with the matching topics only (a namespace
    #: of 100,000 topics is not sent whole to each pattern consumer at each poll).
    enable_broker_side_subscription_pattern_evaluation: bool = True
    #: Pulsar's subscriptionPatternMaxLength: a longer pattern is not evaluated (the whole list is
    #: answered and the client filters it).
    subscription_pattern_max_length: PositiveInt = 50

    # Tiered storage (docs/tiered-storage.md; Pulsar's names in snake_case). Off unless a driver is set.
    #: Pulsar's managedLedgerOffloadDriver: aws-s3 (or S3), google-cloud-storage, azureblob, filesystem.
    managed_ledger_offload_driver: str | None = None
    #: The bucket (container, for azureblob) offloaded ledgers go to (Pulsar's managedLedgerOffloadBucket).
    managed_ledger_offload_bucket: str | None = None
    managed_ledger_offload_region: str | None = None
    #: An S3-compatible store's URL (MinIO, Ceph ...); http:// is allowed.
    managed_ledger_offload_service_endpoint: str | None = None
    #: The filesystem driver's directory (a path or file:// URI; an NFS mount), Pulsar's fileSystemURI.
    file_system_uri: str | None = None
    #: A file of name=value lines with the store's credentials (else the environment: AWS_*,
    #: GOOGLE_*, AZURE_STORAGE_*); never logged.
    managed_ledger_offload_credentials_file: str | None = None
    #: Pulsar's gcsManagedLedgerOffloadServiceAccountKeyFile.
    gcs_managed_ledger_offload_service_account_key_file: str | None = None
    #: Pulsar's managedLedgerOffloadAutoTriggerSizeThresholdBytes: bytes a topic keeps locally before
    #: its older closed ledgers are offloaded (-1: off, 0: as soon as closed); namespaces and topics
    #: may set their own (offloadThreshold).
    managed_ledger_offload_threshold_in_bytes: Annotated[int, Field(ge=-1)] = -1
    #: Pulsar's managedLedgerOffloadThresholdInSeconds: a closed ledger is offloaded this long after
    #: its close, whatever the size threshold says (-1: not by age; 0: as soon as closed);
    #: namespaces and topics may set their own (offloadThresholdInSeconds).
    managed_ledger_offload_threshold_in_seconds: Annotated[int, Field(ge=-1)] = -1
    #: Pulsar's managedLedgerOffloadDeletionLagMs: how long a verified offload's local copy stays.
    managed_ledger_offload_deletion_lag_ms: Annotated[int, Field(ge=-1)] = 4 * 3600 * 1000
    #: Pulsar's managedLedgerOffloadMaxThreads: ledgers uploaded at once.
    managed_ledger_offload_max_threads: PositiveInt = 2
    #: Threads reading offloaded ranges.
    managed_ledger_offload_read_threads: PositiveInt = 2
    #: Pulsar's managedLedgerOffloadMaxBlockSizeInBytes: multipart part size of uploads.
    managed_ledger_offload_max_block_size_in_bytes: Annotated[int, Field(ge=5 * MIB)] = 64 * MIB
    #: One request to the object store fails after this long.
    managed_ledger_offload_timeout_seconds: PositiveFloat = 30.0
    #: How often topics are checked against their offload threshold and deletion lag.
    managed_ledger_offload_check_interval_seconds: PositiveFloat = 60.0
    #: Memory for offloaded data read back (the read-ahead cache), all topics together.
    managed_ledger_offload_read_cache_bytes: NonNegativeInt = _STORAGE_DEFAULTS.offload_read_cache_bytes
    #: Pulsar's managedLedgerOffloadReadBufferSizeInBytes: the unit of range reads.
    managed_ledger_offload_read_buffer_size_in_bytes: PositiveInt = _STORAGE_DEFAULTS.offload_read_block_bytes
    #: Pulsar's managedLedgerOffloadPrefetchRounds: read buffers fetched ahead of what a read needs.
    managed_ledger_offload_prefetch_rounds: NonNegativeInt = _STORAGE_DEFAULTS.offload_prefetch_blocks
    #: After a failed read from the store, reads of offloaded data fail at once this long.
    managed_ledger_offload_read_retry_seconds: NonNegativeFloat = _STORAGE_DEFAULTS.offload_read_retry_seconds
    #: The longest a seek or admin look-up waits for offloaded bytes.
    managed_ledger_offload_read_timeout_seconds: PositiveFloat = (
        _STORAGE_DEFAULTS.offload_read_timeout_seconds
    )

    # Backlog quotas (see backlog_quota.py; namespaces may set their own).
    #: Largest backlog per topic, in bytes from the slowest subscription on (-1: no limit).
    backlog_quota_default_limit_bytes: QuotaLimit = -1
    #: Oldest unacknowledged message per topic, in seconds (-1: no limit).
    backlog_quota_default_limit_seconds: QuotaLimit = -1
    #: producer_request_hold, producer_exception or consumer_backlog_eviction.
    backlog_quota_default_retention_policy: backlog_quota.RetentionPolicy = backlog_quota.HOLD
    #: How often topics are checked against their backlog quotas.
    backlog_quota_check_interval_seconds: PositiveFloat = 60.0

    # Topic compaction (docs/compaction.md, Pulsar's names).
    #: Pulsar's brokerServiceCompactionThresholdInBytes: a topic is compacted by itself once the
    #: backlog of its __compaction cursor passes this many bytes, where neither the topic nor its
    #: namespace sets a compactionThreshold; 0: never by itself.
    broker_service_compaction_threshold_in_bytes: NonNegativeInt = 0
    #: Pulsar's brokerServiceCompactionMonitorIntervalInSeconds: how often loaded topics are
    #: checked against their compaction threshold.
    broker_service_compaction_monitor_interval_in_seconds: PositiveFloat = 60.0
    #: Milliseconds of a compaction's work between two yields of the GIL, so that the event loop
    #: serves sends meanwhile without waiting for Python's switch interval (compactor.py); 0: never.
    compaction_yield_interval_ms: NonNegativeFloat = 0.2
    #: TESTS ONLY: every compaction waits at this step until the broker stops (compaction_pause.py),
    #: so that a crash test kills the broker there. Never set it in production.
    test_compaction_pause_at: CompactionStep | None = None

    # Topics.
    #: Broker-side deduplication by producer name and sequence id (namespaces may override).
    deduplication_enabled: bool = False
    allow_auto_topic_creation: bool = True
    #: Type of auto-created topics: "non-partitioned" or "partitioned" (namespaces may override).
    auto_topic_creation_type: Literal["non-partitioned", "partitioned"] = "non-partitioned"
    #: Partitions of an auto-created partitioned topic.
    default_num_partitions: PositiveInt = 1

    # Broker entry metadata (PIP 70).
    broker_entry_metadata_interceptors: list[str] = field(
        default_factory=lambda: ["broker_timestamp", "index"]
    )
    expose_entry_metadata_to_client: bool = True

    # Authentication (docs/configuration.md, Pulsar's names). Off by default.
    #: Every client (binary protocol and admin HTTP API) must prove a role with a provider below.
    authentication_enabled: bool = False
    #: Providers by name: "token" (Pulsar's AuthenticationProviderToken).
    authentication_providers: list[str] = field(default_factory=lambda: ["token"])
    #: The HS256 secret key checking tokens: file:///path, data:;base64,..., a path, or base64.
    token_secret_key: str | None = None
    #: The public key (DER as ``tokens create-key-pair`` writes it, or PEM) checking RS/ES tokens.
    token_public_key: str | None = None
    #: Algorithm family of token_public_key: RS256 (RSA keys) or ES256/ES384/ES512 (EC keys).
    token_public_alg: str = "RS256"
    #: The token claim that names the role.
    token_auth_claim: str = "sub"
    #: How often open connections' credentials are checked for expiry; an expired one is
    #: challenged (AUTH_CHALLENGE) and closed if it does not answer with valid ones by the next check.
    authentication_refresh_check_seconds: PositiveFloat = 60.0
    #: With authentication on, /metrics (and the health check) need credentials too; false leaves
    #: them open for Prometheus.
    authenticate_metrics_endpoint: bool = True

    # Authorization (Pulsar's names; broker/authorization.py). Off by default.
    #: Check every producer, consumer, lookup and admin call against the namespace's grants;
    #: needs authentication_enabled (without a proved role nothing could be granted).
    authorization_enabled: bool = False
    #: Roles that may do everything (grants and tenants included).
    superuser_roles: list[str] = field(default_factory=list)
    #: Grants to ``prefix*`` or ``*suffix`` roles match roles so named.
    authorization_allow_wildcards_matching: bool = False

    def storage_config(self) -> StorageConfig:
        """The storage layer's settings, as this broker's."""
        passed = {name: getattr(self, name) for name in STORAGE_SETTINGS}
        passed.update({ours: getattr(self, name) for name, ours in OFFLOAD_READ_SETTINGS.items()})
        return StorageConfig(data_dir=Path(self.data_dir), **passed)

    def offload_settings(self) -> OffloadSettings | None:
        """The offload driver's settings; None while tiered storage is off (no driver)."""
        if not self.managed_ledger_offload_driver:
            return None
        return OffloadSettings(
            self.managed_ledger_offload_driver,
            bucket=self.managed_ledger_offload_bucket,
            region=self.managed_ledger_offload_region,
            service_endpoint=self.managed_ledger_offload_service_endpoint,
            file_system_uri=self.file_system_uri,
            credentials_file=self.managed_ledger_offload_credentials_file,
            gcs_service_account_key_file=self.gcs_managed_ledger_offload_service_account_key_file,
            max_threads=self.managed_ledger_offload_max_threads,
            read_threads=self.managed_ledger_offload_read_threads,
            max_block_size_in_bytes=self.managed_ledger_offload_max_block_size_in_bytes,
            timeout_seconds=self.managed_ledger_offload_timeout_seconds,
        )

    def offload_policies(self) -> OffloadPolicies:
        """The broker's offload threshold and deletion lag (where no namespace or topic sets one)."""
        return OffloadPolicies(
            self.managed_ledger_offload_threshold_in_bytes,
            self.managed_ledger_offload_deletion_lag_ms,
            self.managed_ledger_offload_threshold_in_seconds,
        )

    def worker_count(self) -> int:
        """``workers`` as a number: ``"auto"`` is the cores this process may run on."""
        if self.workers == "auto":
            return len(os.sched_getaffinity(0))
        return self.workers

    def default_backlog_quotas(self) -> dict[str, backlog_quota.BacklogQuota]:
        policy = self.backlog_quota_default_retention_policy
        return {
            backlog_quota.SIZE: backlog_quota.BacklogQuota(
                limit_size=self.backlog_quota_default_limit_bytes, policy=policy
            ),
            backlog_quota.AGE: backlog_quota.BacklogQuota(
                limit_time=self.backlog_quota_default_limit_seconds, policy=policy
            ),
        }

    def inactive_topic_policies(self) -> InactiveTopicPolicies:
        """The broker's inactive-topic policies (where neither a namespace nor a topic sets any)."""
        duration = self.broker_delete_inactive_topics_max_inactive_duration_seconds
        return InactiveTopicPolicies(
            self.broker_delete_inactive_topics_mode,
            self.broker_delete_inactive_topics_frequency_seconds if duration is None else duration,
            self.broker_delete_inactive_topics_enabled,
        )

    def validate(self) -> None:
        """The checks across settings that need no other module (the rest: ``startup.prepare``)."""
        settings = self.offload_settings()
        if settings is not None:
            settings.check()  # the driver's name, its bucket or directory
        if self.mqtt_message_max_length > MQTT_MAX_PACKET_SIZE:
            raise ValueError(
                f"mqtt_message_max_length {self.mqtt_message_max_length} is over MQTT's own limit "
                f"of {MQTT_MAX_PACKET_SIZE} bytes"
            )
        if self.authorization_enabled and not self.authentication_enabled:
            raise ValueError(
                "authorization_enabled needs authentication_enabled: without a proved role no grant can apply"
            )

    @classmethod
    def load(
        cls, path: Path | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> BrokerConfig:
        """Defaults, then the TOML file at ``path``, then ``MAGNETAR_*`` variables of ``environ``
        (none unless given), then non-None ``overrides`` (the command line); each value checked
        against its setting's type (``config_sources.py``), then ``validate``d; ``startup.load``
        checks the rest."""
        return cls.load_with_sources(path, environ, **overrides)[0]

    @classmethod
    def load_with_sources(
        cls, path: Path | None = None, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> tuple[BrokerConfig, dict[str, str]]:
        """``load``, and where each setting's value came from (``magnetar config show``)."""
        every_hint = typing.get_type_hints(cls)
        hints = {f.name: every_hint[f.name] for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        sources = dict.fromkeys(hints, "default")
        if path is not None:
            from_file = _read_toml(path)
            for name, value in from_file.items():
                where = f"file {path}"
                if name not in hints:
                    raise ConfigError(f"unknown setting {name!r} ({where})")
                values[name] = value
                sources[name] = where
        if environ is not None:
            for name, (value, where) in config_sources.env_settings(environ, hints).items():
                values[name] = value
                sources[name] = where
        for name, value in overrides.items():
            if value is None:
                continue
            if name not in hints:
                raise ConfigError(f"unknown setting {name!r} (command line)")
            values[name] = value
            sources[name] = "command line"
        port = values.get("port")
        if "http_port" not in values and type(port) is int:
            values["http_port"] = http_port_for(port)
            sources["http_port"] = f"derived from port, {sources['port']}"
        try:
            config = cls(**values)
        except ValidationError as exc:
            raise config_sources.refusal(exc, values, sources) from None
        config.validate()
        return config, sources


def http_port_for(port: int) -> int:
    """The HTTP port of a broker given ``port`` but no ``http_port``: ``port`` + 1430, so that a
    second broker started with ``--port 6651`` alone serves HTTP on 8081 instead of failing on the
    first one's 8080; 0 (a free port, named in the ``listening on`` line) for port 0 or past 65535."""
    http_port = port + HTTP_PORT_OFFSET
    return http_port if port > 0 and http_port <= 65535 else 0


def _read_toml(path: Path) -> dict[str, Any]:
    """The settings file, or a ``ConfigError`` saying in one line why it cannot be read."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"cannot read the settings file {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the settings file {path} is not valid TOML: {exc}") from None
