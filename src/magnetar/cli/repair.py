"""``magnetar repair``: rebuild the metadata store from the ledger files, with the broker stopped.

The storage layer finds the managed ledgers, ledgers and cursors (``storage/repair.py``); this
adds what the broker keeps about them (each topic's tenant and namespace, the partition count of
a partitioned topic whose partitions it found) and prints what it did and what is lost.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.offload.recovery import StoreRecovery

NOTE = """\
Rebuilds the metadata store (metadata.sqlite) of a data directory from its ledger files, e.g.
after the metadata was deleted or damaged (a broker refuses to start then, and names this
command). Topic names come from the ledger directories' names, ledgers from the segment files and,
with tiered storage configured, from the offloaded objects in the store, subscriptions from the
cursor ledgers. Topics the metadata store already knows are left as they
are, and nothing is deleted. Stop the broker first: repair refuses to run while one holds the
data directory. See docs/storage.md, "Lost metadata and magnetar repair"."""


def run(args: argparse.Namespace) -> int:
    from magnetar.broker import startup
    from magnetar.broker.data_dir_lock import DataDirError, DataDirInUse, DataDirLock
    from magnetar.storage.repair import repair

    config = startup.load(args.config, os.environ, data_dir=args.data_dir).config
    data_dir = config.data_dir
    if not Path(data_dir).is_dir():
        print(f"magnetar repair: {data_dir} is not a directory", file=sys.stderr)
        return 1
    lock = DataDirLock(data_dir)
    try:
        lock.acquire()
    except DataDirInUse as exc:
        print(f"magnetar repair: {exc}; stop it first", file=sys.stderr)
        return 1
    except DataDirError as exc:
        print(f"magnetar repair: {exc}", file=sys.stderr)
        return 1
    try:
        offloaded = _object_store(config)
        try:
            report = repair(data_dir, offloaded)
        finally:
            if offloaded is not None:
                offloaded.io.close()
        _restore_namespaces(data_dir, report.topics, report.lines)
    finally:
        lock.release()
    print(f"magnetar repair of {data_dir}:")
    if report.rebuilt_store:
        print("  the metadata store was missing, empty or damaged: rebuilt from the ledger files")
    for line in report.lines:
        print(f"  {line}")
    if report.lost:
        print("lost (not recoverable from the files):")
        for line in report.lost:
            print(f"  - {line}")
    print(f"repaired: {len(report.topics)} topics recorded; start the broker again")
    return 0


def _object_store(config: BrokerConfig) -> StoreRecovery | None:
    """The broker's object store (tiered storage), to find offloaded ledgers in; None without one."""
    from magnetar.offload.drivers import open_store
    from magnetar.offload.object_io import ObjectIO
    from magnetar.offload.recovery import StoreRecovery

    settings = config.offload_settings()
    if settings is None:
        return None
    print(f"magnetar repair: offloaded ledgers are looked for in {settings.describe()}")
    return StoreRecovery(ObjectIO(open_store(settings), settings))


def _restore_namespaces(data_dir: Path, topics: list[str], lines: list[str]) -> None:
    """Give every imported topic its tenant and namespace (default policies), and a partitioned
    topic whose partitions were found a partition count that covers them."""
    from magnetar.broker.namespaces import NamespacePolicies, NamespaceRegistry
    from magnetar.protocol.topic_name import TopicName
    from magnetar.storage.metadata_store import MetadataStore
    from magnetar.storage.store import METADATA_FILE

    store = MetadataStore(Path(data_dir) / METADATA_FILE)
    try:
        registry = NamespaceRegistry(store)
        partitions: dict[str, int] = {}
        for key in topics:
            try:
                name = TopicName.parse(key)
            except ValueError:
                continue
            if name.tenant not in registry.tenants():
                registry.create_tenant(name.tenant, {"adminRoles": [], "allowedClusters": ["standalone"]})
                lines.append(f"tenant {name.tenant} created again")
            if not registry.exists(name.namespace_name):
                registry.create_namespace(name.namespace_name, NamespacePolicies())
                lines.append(f"namespace {name.namespace_name} created again with default policies")
            base = name.partitioned_base()
            if base is not None:
                partitions[str(base)] = max(partitions.get(str(base), 0), name.partition_index + 1)
        for partitioned, count in sorted(partitions.items()):
            if registry.partitions(partitioned) < count:
                registry.set_partitions(partitioned, count)
                lines.append(f"partitioned topic {partitioned}: {count} partitions (the highest found + 1)")
    finally:
        store.close()
