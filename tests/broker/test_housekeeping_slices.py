"""A housekeeping pass over many loaded topics lets the loop serve everyone else between slices of
``SLICE`` topics, instead of stalling it for the whole pass (100,000 topics: seconds)."""

from __future__ import annotations

import asyncio
from functools import partial

from magnetar.broker import housekeeping
from magnetar.broker.topic_slices import SLICE


class Topic:
    def __init__(self, key: str, log: list[str]) -> None:
        self.key = key
        self.log = log

    def flush(self) -> None:
        self.log.append(self.key)


def test_a_pass_over_many_topics_lets_the_loop_run_between_slices():
    log: list[str] = []
    topics = {f"t{i}": Topic(f"t{i}", log) for i in range(2 * SLICE + 1)}

    async def flushed_when_another_task_runs() -> int:
        task = asyncio.create_task(housekeeping.every(0, partial(housekeeping.flush_all, topics)))
        while not log:
            await asyncio.sleep(0)
        task.cancel()
        return len(log)

    assert asyncio.run(flushed_when_another_task_runs()) == SLICE


def test_a_topic_unloaded_during_a_pass_is_left_out():
    log: list[str] = []
    topics = {f"t{i}": Topic(f"t{i}", log) for i in range(SLICE + 1)}
    steps = housekeeping.flush_all(topics)
    next(steps)  # the first slice
    del topics[f"t{SLICE}"]
    for _ in steps:
        pass
    assert log == [f"t{i}" for i in range(SLICE)]
