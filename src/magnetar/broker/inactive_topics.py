"""Topics nobody uses: unloaded after a while, so that an idle topic costs neither memory nor
files (issue 40: 10K topics each given one message kept ~14.5 KiB and two descriptors apiece),
and loaded again on their next use.

A topic is in use while it has a producer, a consumer (a reader's too), a replicator, a broadcast
consumer kept detached for its reconnect grace, or work under way (adds not yet stored,
subscriptions being created, a terminate waiting). Each sweep (every
``broker_delete_inactive_topics_frequency_seconds``, Pulsar's "how often to check for inactive
topics"; a slice of ``topic_slices.SLICE`` topics at a time, the loop serving everyone else
between slices) notes which loaded topics are; one not seen in use for
``broker_unload_inactive_topics_seconds`` is unloaded. Its durable subscriptions keep their
places: they are stored, and read back when it loads again.

Where an inactive-topic policy deletes topics (inactive_topic_policies.py), an unused persistent
topic its mode allows to delete is deleted once unused for the policy's duration, and stays
loaded until then (an unloaded topic is not looked at); one it does not allow to delete (a
subscription with a backlog) is unloaded as any other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING

from magnetar.broker.inactive_topic_policies import NO_SUBSCRIPTIONS, DeleteMode, InactiveTopicPolicies
from magnetar.broker.topic_slices import in_slices

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


def deletable(topic: AnyTopic, mode: DeleteMode) -> bool:
    """Whether ``mode`` lets an unused ``topic`` be deleted: a persistent one, not replicated, with
    no subscription (``delete_when_no_subscriptions``) or none with a backlog (``..._caught_up``)."""
    if topic.ml is None or topic.replication_cursors:
        return False
    if mode == NO_SUBSCRIPTIONS:
        return not topic.subscriptions
    return all(subscription.cursor.backlog() == 0 for subscription in topic.subscriptions.values())


class InactiveTopics:
    """When each loaded topic was last seen in use, by the sweeps (a topic first seen is counted
    as in use then: it was just loaded for a use)."""

    def __init__(self) -> None:
        self._last_used: dict[str, float] = {}
        #: Topics unloaded, and deleted by an inactive-topic policy, since start (/metrics).
        self.unloaded = 0
        self.deleted = 0

    def sweep(
        self,
        topics: Mapping[str, AnyTopic],
        now: float,
        unload_after: float,
        unload: Callable[[AnyTopic], None],
        unloaded: Callable[[], None],
        policies: Callable[[AnyTopic], InactiveTopicPolicies] | None = None,
        delete: Callable[[AnyTopic], None] | None = None,
    ) -> int:
        """One whole sweep at once (``sweeping``'s slices one after the other); how many went."""
        steps = self.sweeping(topics, lambda: now, unload_after, unload, unloaded, policies, delete)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                gone: int = done.value
                return gone

    def sweeping(
        self,
        topics: Mapping[str, AnyTopic],
        clock: Callable[[], float],
        unload_after: float,
        unload: Callable[[AnyTopic], object],
        unloaded: Callable[[], None],
        policies: Callable[[AnyTopic], InactiveTopicPolicies] | None = None,
        delete: Callable[[AnyTopic], None] | None = None,
    ) -> Generator[None, None, int]:
        """A sweep over the topics loaded when it begins, ``topic_slices.SLICE`` at a time (the
        loop serves everyone else between slices; ``clock`` is read at each): delete (``delete``)
        each unused topic its ``policies`` say to, once unused for their duration; unload
        (``unload``) the others unused for ``unload_after`` seconds (0: never); then call
        ``unloaded`` once if any went. Returns how many went."""
        gone = deleted = 0
        last_used: dict[str, float] = {}  # the topics still loaded, as this sweep sees them
        for part in in_slices(topics):
            now = clock()
            for key, topic in part:
                if in_use(topic):
                    last_used[key] = now
                    continue
                since = self._last_used.get(key, now)
                idle_for = now - since
                policy = policies(topic) if policies is not None and delete is not None else None
                if (
                    policy is not None
                    and policy.delete_while_inactive
                    and deletable(topic, policy.inactive_topic_delete_mode)
                ):
                    if delete is not None and idle_for >= policy.max_inactive_duration_seconds:
                        log.info(
                            "%s: deleted, unused for %gs (inactive topic policies)", topic.name, idle_for
                        )
                        delete(topic)
                        deleted += 1
                    else:  # kept loaded until then: an unloaded topic is not looked at
                        last_used[key] = since
                    continue
                if unload_after and idle_for >= unload_after:
                    unload(topic)
                    gone += 1
                else:
                    last_used[key] = since
            yield
        self._last_used = last_used
        self.unloaded += gone
        self.deleted += deleted
        if gone:
            log.info("unloaded %d topic(s) unused for %gs or more", gone, unload_after)
        if gone or deleted:
            unloaded()
        return gone + deleted
