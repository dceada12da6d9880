"""Terminating a topic answers only once the sends accepted before it are stored (as Pulsar waits
for its pending adds): the position it answers is never one that may yet be lost."""

from __future__ import annotations

import asyncio

from .entry_harness import message


def test_terminate_answers_after_the_sends_before_it_are_durable(harnesses):
    h = harnesses(fsync_policy="always")
    topic = h.topic()

    async def scenario() -> None:
        receipts = [h.publish_nowait(message(b"%d" % i, seq=i)) for i in range(3)]
        accepted = topic.ml.last_added  # its fsync is still to come (or under way)
        last = await topic.terminate()
        assert last == accepted == topic.ml.last_confirmed  # durable when answered
        assert (await asyncio.gather(*receipts))[-1] == last
        assert await topic.terminate() == last  # again: the same answer

    h.run(scenario())
    assert topic.terminated


def test_terminate_of_a_topic_with_nothing_pending_answers_its_last_entry(harnesses):
    h = harnesses()
    topic = h.topic()
    stored = h.publish_all([message(b"a", seq=0), message(b"b", seq=1)])
    assert h.run(topic.terminate()) == stored[-1]
