"""Regex subscriptions: one subscription over every topic of a namespace whose name matches.

As Pulsar's clients do, the pattern names its namespace (``persistent://tenant/ns/orders-.*``;
a bare ``orders-.*`` is ``persistent://public/default/orders-.*``), the broker lists the
namespace's topics (GET_TOPICS_OF_NAMESPACE, partitions included; with the pattern, so the
broker answers with the matching topics only), and a topic is taken when its whole name, without
a partition's ``-partition-N`` suffix, matches the pattern: a partitioned topic is taken with all
its partitions. The list is asked for again every
``pattern_auto_discovery_period`` seconds (with the hash of the last answer, so an unchanged
namespace costs a short reply): new topics are subscribed, deleted ones dropped.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any

from magnetar.client.consumer import ConsumerConfig
from magnetar.client.errors import InvalidConfiguration
from magnetar.client.multi_topics_consumer import MultiTopicsConsumer
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.topic_name import InvalidTopicName, split_partition, split_topic_pattern

if TYPE_CHECKING:
    from magnetar.client.services import ClientServices

log = logging.getLogger(__name__)

_MODES: dict[str, wire.CommandGetTopicsOfNamespace.Mode.ValueType] = {
    "persistent": wire.CommandGetTopicsOfNamespace.PERSISTENT,
    "non-persistent": wire.CommandGetTopicsOfNamespace.NON_PERSISTENT,
}


def parse_pattern(
    pattern: re.Pattern[str] | str,
) -> tuple[str, wire.CommandGetTopicsOfNamespace.Mode.ValueType, re.Pattern[str]]:
    """(namespace, GET_TOPICS_OF_NAMESPACE mode, the pattern over full topic names)."""
    text = pattern.pattern if isinstance(pattern, re.Pattern) else pattern
    flags = pattern.flags if isinstance(pattern, re.Pattern) else 0
    try:
        domain, namespace, full = split_topic_pattern(text)
    except InvalidTopicName as exc:
        raise InvalidConfiguration(str(exc)) from None
    return namespace, _MODES[domain], re.compile(full, flags)


def matching_topics(topics: list[str], pattern: re.Pattern[str]) -> list[tuple[str, int]]:
    """(name, partition index or -1) of each topic whose name, partition suffix removed, matches."""
    out = []
    for name in topics:
        base, index = split_partition(name)
        if pattern.fullmatch(base):
            out.append((name, index))
    return out


class PatternConsumer(MultiTopicsConsumer):
    """A multi-topics consumer whose topics are those a regex matches, found again periodically."""

    def __init__(
        self, client: ClientServices, pattern: re.Pattern[str] | str, config: ConsumerConfig, period_s: float
    ) -> None:
        self._namespace, self._mode, self._pattern = parse_pattern(pattern)
        super().__init__(client, [self._pattern.pattern], config, [])
        self._period_s = period_s
        self._topics_hash: str | None = None
        self._discovery: asyncio.Task | None = None

    async def start(self) -> None:
        try:
            await self.discover()
        except BaseException:
            await self.close()  # the topics that did take are let go, with the subscribe
            raise
        if self._period_s > 0:
            self._discovery = asyncio.get_running_loop().create_task(self._rediscover())

    async def discover(self) -> None:
        """Ask the broker for the namespace's topics; subscribe to new matches, drop gone ones."""
        answer = await self.client.get_topics_of_namespace(
            self._namespace, self._mode, self._topics_hash, self._broker_side_pattern()
        )
        if answer.HasField("changed") and not answer.changed:
            return
        self._topics_hash = answer.topics_hash if answer.HasField("topics_hash") else None
        wanted = dict(matching_topics(list(answer.topics), self._pattern))
        added = [self._add_child(name, index) for name, index in wanted.items() if name not in self._by_topic]
        outcomes = await asyncio.gather(*(child.start() for child in added), return_exceptions=True)
        failure: BaseException | None = None
        for child, outcome in zip(added, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                # Forgotten, so the next discovery tries that topic again.
                await self._remove_child(child.topic())
                failure = failure or outcome
        for gone in [name for name in self._by_topic if name not in wanted]:
            await self._remove_child(gone)
        if failure is not None:
            self._topics_hash = None  # the list did not all take: ask for it whole next time
            raise failure

    def _broker_side_pattern(self) -> str | None:
        """The pattern for the broker to filter the list with, as Pulsar's clients send it; not
        one with flags the broker cannot know of (it would leave out topics the client takes)."""
        flags = self._pattern.flags & ~re.UNICODE
        return None if flags else self._pattern.pattern

    async def _rediscover(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._period_s)
            if self._closed:
                return
            try:
                await self.discover()
            except Exception as exc:  # a background loop: log, and try again at the next period
                log.warning("%s: topic discovery failed, trying again later: %s", self.topic(), exc)

    async def close(self) -> None:
        if self._discovery is not None:
            self._discovery.cancel()
        await super().close()

    async def unsubscribe(self) -> None:
        if self._discovery is not None:
            self._discovery.cancel()
        await super().unsubscribe()


def pattern_consumer(
    client: ClientServices, pattern: re.Pattern[str] | str, config: ConsumerConfig, options: dict[str, Any]
) -> PatternConsumer:
    if config.receiver_queue_size == 0:
        raise InvalidConfiguration(
            "receiver_queue_size=0 needs a single non-partitioned topic, not a pattern"
        )
    return PatternConsumer(client, pattern, config, float(options.get("pattern_auto_discovery_period", 60)))
