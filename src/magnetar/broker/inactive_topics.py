"""Topics nobody uses: unloaded after a while, so that an idle topic costs neither memory nor
files (issue 40: 10K topics each given one message kept ~14.5 KiB and two descriptors apiece),
and loaded again on their next use.

A topic is in use while it has a producer, a consumer (a reader's too), a replicator, a broadcast
consumer kept detached for its reconnect grace, or work under way (adds not yet stored,
subscriptions being created, a terminate waiting). Each sweep (every
``broker_delete_inactive_topics_frequency_seconds``, Pulsar's "how often to check for inactive
topics") notes which loaded topics are; one not seen in use for
``broker_unload_inactive_topics_seconds`` is unloaded. Its durable subscriptions keep their
places: they are stored, and read back when it loads again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.nonpersistent import NonPersistentTopic
    from magnetar.broker.topic import PersistentTopic

    AnyTopic = PersistentTopic | NonPersistentTopic

log = logging.getLogger(__name__)


def in_use(topic: AnyTopic) -> bool:
    """Whether anyone uses ``topic`` now, or work on it is under way (see the module's doc)."""
    if topic.producers or topic.replicators or topic.busy:
        return True
    for subscription in topic.subscriptions.values():
        if subscription.consumers or getattr(subscription.dispatcher, "detached", None):
            return True
    return False


class InactiveTopics:
    """When each loaded topic was last seen in use, by the sweeps (a topic first seen is counted
    as in use then: it was just loaded for a use)."""

    def __init__(self) -> None:
        self._last_used: dict[str, float] = {}
        #: Topics unloaded since start (/metrics).
        self.unloaded = 0

    def idle(self, topics: Mapping[str, AnyTopic], now: float) -> list[tuple[AnyTopic, float]]:
        """The loaded topics not in use now, each with how long it has not been seen in use."""
        last_used: dict[str, float] = {}
        idle = []
        for key, topic in topics.items():
            if in_use(topic):
                last_used[key] = now
                continue
            since = last_used[key] = self._last_used.get(key, now)
            idle.append((topic, now - since))
        self._last_used = last_used
        return idle

    def sweep(
        self,
        topics: Mapping[str, AnyTopic],
        now: float,
        unload_after: float,
        unload: Callable[[AnyTopic], None],
        unloaded: Callable[[], None],
    ) -> int:
        """Unload (``unload``) each topic idle for ``unload_after`` seconds (0: never), then call
        ``unloaded`` once if any was; how many were."""
        count = 0
        for topic, idle_for in self.idle(topics, now):
            if unload_after and idle_for >= unload_after:
                self._last_used.pop(str(topic.name), None)
                unload(topic)
                count += 1
        self.unloaded += count
        if count:
            log.info("unloaded %d topic(s) unused for %gs or more", count, unload_after)
            unloaded()
        return count
