"""Which replicators run: one per loaded persistent topic (partition) and remote cluster it
replicates to, as the topic's and its namespace's replication clusters say.

The broker tells the manager when a topic is loaded or replication policies change
(``BrokerService.replication_listeners``); the manager then looks at every loaded topic once
(soon after, many changes together), and again every ``SWEEP_INTERVAL_S`` for what no event
announces (a deleted topic, a cluster's data changed). A remote cluster dropped from a topic's
clusters has its replicator stopped and its cursor deleted, as in Pulsar.

A replicated topic replicates only while loaded, and is loaded where its bundle is owned: at
start-up each broker loads the stored replicated topics of the bundles it owns, and again whenever
bundles lose their owner (an unload, a worker gone: ``BrokerService.ownership_listeners``), so that
a bundle's new owner resumes the replication of its topics without waiting for a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from magnetar.broker.topic import PersistentTopic
from magnetar.protocol.topic_name import TopicName
from magnetar.replication.replicator_state import ReplicatorState

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.replication.remote import Remote
    from magnetar.replication.replicator import Replicator

log = logging.getLogger(__name__)

#: A pass over every loaded topic at least this often.
SWEEP_INTERVAL_S = 5.0
#: After an event, wait this long for more before the pass (a storm of topic loads: one pass).
SETTLE_S = 0.05
#: How long ``stop`` waits for its tasks and the remotes' clients to end.
STOP_TIMEOUT_S = 10.0


class ReplicationManager:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        #: Remote clusters in use, by name.
        self.remotes: dict[str, Remote] = {}
        #: Running replicators by (topic name, remote cluster).
        self.replicators: dict[tuple[str, str], Replicator] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._loading: asyncio.Task | None = None
        #: Bundles moved while the replicated topics were being loaded: load them once more after.
        self._load_again = False
        self._stopped = False
        #: Errors already logged (a cluster's bad data), so each is said once.
        self._said: set[str] = set()

    async def start(self) -> None:
        self.service.replication_listeners.append(self._changed.set)
        self.service.ownership_listeners.append(self._bundles_moved)
        self._changed.set()
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="replication manager")
        self._bundles_moved()

    def _bundles_moved(self) -> None:
        """Load the replicated topics of the bundles this broker owns now (once at a time)."""
        if self._stopped:
            return
        if self._loading is not None and not self._loading.done():
            self._load_again = True
            return
        self._loading = asyncio.get_running_loop().create_task(
            self._load_replicated_topics(), name="replication: loading topics"
        )
        self._loading.add_done_callback(self._loaded)

    def _loaded(self, task: asyncio.Task) -> None:
        if self._load_again:
            self._load_again = False
            self._bundles_moved()

    def replicated_topics(self) -> list[str]:
        """The stored topics that replicate somewhere: those of the namespaces replicating to a
        remote cluster, and those with an override of their own."""
        service = self.service
        remotes = [c for c in service.clusters.names() if c != service.config.cluster_name]
        namespaces = {ns for remote in remotes for ns in service.namespaces.replication_users(remote)}
        names = {name for ns in namespaces for name in service.topics_of_namespace(ns)}
        overridden = set(service.topic_replication.all())
        if overridden:  # else not a name read, nor parsed, per stored topic (100,000 of them)
            for name in service.storage.managed_ledger_names():
                topic = TopicName.parse(name)
                if str(topic.partitioned_base() or topic) in overridden:
                    names.add(name)
        return sorted(names)

    async def _load_replicated_topics(self) -> None:
        """Open, after a restart, every stored topic that replicates: a topic is replicated while
        it is loaded, and what it still owes a remote must go without waiting for a client to
        touch it (on the open threads, as a client's first use would)."""
        try:
            for name in self.replicated_topics():
                topic = TopicName.parse(name)
                if name in self.service.topics:
                    continue
                try:
                    if not self.service.serves(topic):
                        continue  # workers: each opens the topics of the bundles it owns
                    opening = self.service.preparing(topic)
                    if opening is not None:
                        await opening
                except Exception as exc:
                    log.warning("replication: cannot load %s: %s", name, exc)
        except Exception:
            log.exception("replication: loading the replicated topics failed")

    async def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(ValueError):
            self.service.replication_listeners.remove(self._changed.set)
        with contextlib.suppress(ValueError):
            self.service.ownership_listeners.remove(self._bundles_moved)
        tasks = [task for task in (self._loading, self._task) if task is not None]
        for task in tasks:
            task.cancel()
        self._changed.set()  # the loop sees _stopped even if a cancel is lost
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        self._task = self._loading = None
        await asyncio.gather(*(r.stop() for r in self.replicators.values()), return_exceptions=True)
        self.replicators.clear()
        remotes = [asyncio.ensure_future(remote.close()) for remote in self.remotes.values()]
        if remotes:
            await asyncio.wait(remotes, timeout=STOP_TIMEOUT_S)
        self.remotes.clear()

    async def _loop(self) -> None:
        while not self._stopped:
            # asyncio.timeout, not wait_for: on 3.11 wait_for swallows a cancel that comes as
            # the event is set, and stop() would wait for this loop for ever.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(SWEEP_INTERVAL_S):
                    await self._changed.wait()
            await asyncio.sleep(SETTLE_S)
            self._changed.clear()
            if self._stopped:
                return
            try:
                await self.reconcile()
            except Exception:
                log.exception("replication: a pass over the topics failed")

    def _say_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._said:
            self._said.add(key)
            log.warning(message, *args)

    async def reconcile(self) -> None:
        """Start the replicators that should run and stop those that should not."""
        service = self.service
        if service.clusters is None:
            return
        wanted: dict[tuple[str, str], PersistentTopic] = {}
        if len(service.clusters.names()) > 1 or self.replicators:
            for key, loaded in list(service.topics.items()):
                if isinstance(loaded, PersistentTopic) and not loaded.ml.closed:
                    for remote in await self._remotes_of(loaded):
                        wanted[(key, remote)] = loaded
        await self._refresh_remotes({remote for _, remote in wanted})
        for pair, replicator in list(self.replicators.items()):
            topic = wanted.get(pair)
            current = self.remotes.get(pair[1])
            if topic is not replicator.topic or current is not replicator.remote:
                del self.replicators[pair]
                await replicator.stop()
        for pair, topic in wanted.items():
            target = self.remotes.get(pair[1])
            if pair in self.replicators or target is None:
                continue
            from magnetar.replication.replicator import Replicator  # the client: only when replicating

            replicator = Replicator(topic, target, service.config.cluster_name, self._partitions(topic))
            self.replicators[pair] = replicator
            replicator.start()
            log.info("replicating %s to cluster %s", topic.name, target.name)

    async def _remotes_of(self, topic: PersistentTopic) -> list[str]:
        """The topic's remote clusters now; its cursors for remotes no longer among them go."""
        try:
            remotes = self.service.replication_clusters_of(topic.name)
        except Exception as exc:
            self._say_once(f"clusters {topic.name}", "%s: cannot tell its clusters: %s", topic.name, exc)
            return []
        if remotes:
            topic.open_replication_cursors(remotes)
        for stale in set(topic.replication_cursors) - set(remotes):
            replicator = self.replicators.pop((str(topic.name), stale), None)
            if replicator is not None:
                await replicator.stop()
            topic.drop_replication_cursor(stale)
            ReplicatorState.delete(topic.ml, stale)
            log.info("%s: no longer replicated to cluster %s", topic.name, stale)
        return remotes

    def _partitions(self, topic: PersistentTopic) -> int:
        base = topic.name.partitioned_base()
        if base is None:
            return 0
        try:
            return self.service.partitions_of(base, auto_create=False)
        except Exception:
            return 0

    async def _refresh_remotes(self, names: set[str]) -> None:
        """A Remote for each cluster in ``names``, made again when its data changed."""
        clusters = self.service.clusters
        assert clusters is not None
        for name in names | set(self.remotes):
            old = self.remotes.get(name)
            try:
                data = clusters.get(name) if name in names else None
            except Exception as exc:  # unknown cluster: named by a policy, then deleted
                self._say_once(f"cluster {name}", "replication to cluster %s: %s", name, exc)
                data = None
            if old is not None and (data is None or data != old.data):
                del self.remotes[name]
                for pair in [p for p in self.replicators if p[1] == name]:
                    await self.replicators.pop(pair).stop()
                await old.close()
                old = None
            if data is not None and old is None:
                try:
                    from magnetar.replication.remote import Remote  # the client: only when replicating

                    self.remotes[name] = Remote(name, data)
                    self._said.discard(f"cluster {name}")
                except Exception as exc:
                    self._say_once(f"cluster {name}", "cannot replicate to cluster %s: %s", name, exc)
