"""The pass scheduler: deferred work runs at the end of a loop pass, phase by phase, on a real loop."""

from __future__ import annotations

import asyncio
import logging

import pytest
import uvloop

from magnetar.broker import loop_pass
from magnetar.broker.loop_pass import COMPLETE, DISPATCH, FLUSH, SYNC, WAKE
from tests.waiting import eventually_async


@pytest.fixture(params=["asyncio", "uvloop"])
def loop(request):
    loop = asyncio.new_event_loop() if request.param == "asyncio" else uvloop.new_event_loop()
    yield loop
    loop.close()


def run(loop: asyncio.AbstractEventLoop, body, done) -> None:
    """Call ``body`` on the running loop, then let the loop run until ``done()``."""

    async def main() -> None:
        body()
        await eventually_async(done, what="the deferred work")

    loop.run_until_complete(main())


def test_phases_run_in_order_whatever_order_they_were_deferred_in(loop):
    seen: list[str] = []

    def body() -> None:
        passes = loop_pass.current()
        passes.defer(FLUSH, lambda: seen.append("flush"))
        passes.defer(DISPATCH, lambda: seen.append("dispatch"))
        passes.defer(COMPLETE, lambda: seen.append("complete"))
        passes.defer(SYNC, lambda: seen.append("sync"))
        passes.defer(WAKE, lambda: seen.append("wake"))
        seen.append("deferred")

    run(loop, body, lambda: len(seen) == 6)
    assert seen == ["deferred", "sync", "complete", "wake", "dispatch", "flush"]


def test_work_for_a_later_phase_runs_in_the_same_pass(loop):
    seen: list[tuple[str, int]] = []
    pass_no = [0]

    async def count_passes() -> None:
        while True:
            pass_no[0] += 1
            await asyncio.sleep(0)  # one turn per loop pass: the passes are what is counted

    def body() -> None:
        passes = loop_pass.current()

        def complete() -> None:
            seen.append(("complete", pass_no[0]))
            passes.defer(DISPATCH, dispatch)

        def dispatch() -> None:
            seen.append(("dispatch", pass_no[0]))
            passes.defer(FLUSH, lambda: seen.append(("flush", pass_no[0])))

        passes.defer(COMPLETE, complete)

    async def main() -> None:
        counter = asyncio.ensure_future(count_passes())
        await eventually_async(lambda: pass_no[0] > 0, what="the pass counter started")
        body()
        await eventually_async(lambda: len(seen) == 3, what="complete, dispatch and flush")
        counter.cancel()

    loop.run_until_complete(main())
    assert [name for name, _ in seen] == ["complete", "dispatch", "flush"]
    assert len({n for _, n in seen}) == 1  # one pass for all three


def test_work_for_a_phase_that_already_ran_waits_for_the_next_pass(loop):
    """A dispatcher asking for another round yields to the I/O behind it instead of spinning."""
    rounds: list[int] = []
    other: list[str] = []

    def body() -> None:
        passes = loop_pass.current()

        def dispatch_round() -> None:
            rounds.append(len(other))
            if len(rounds) < 3:
                passes.defer(DISPATCH, dispatch_round)

        def io_callback() -> None:  # stands for the reads of each pass
            other.append("io")
            if len(other) < 5:
                asyncio.get_running_loop().call_soon(io_callback)

        passes.defer(DISPATCH, dispatch_round)
        asyncio.get_running_loop().call_soon(io_callback)

    run(loop, body, lambda: len(rounds) == 3 and len(other) == 5)
    assert rounds[0] < rounds[1] < rounds[2]  # other callbacks ran between the rounds


def test_run_now_runs_a_completion_and_the_phases_after_it_at_once(loop):
    seen: list[str] = []

    def body() -> None:
        passes = loop_pass.current()

        def completion() -> None:
            seen.append("complete")
            passes.defer(FLUSH, lambda: seen.append("flush"))

        passes.run_now(completion)
        seen.append("returned")

    run(loop, body, lambda: len(seen) == 3)
    assert seen == ["complete", "flush", "returned"]


def test_a_raising_callback_is_logged_and_the_rest_still_run(loop, caplog):
    seen: list[str] = []

    def boom() -> None:
        raise RuntimeError("boom")

    def body() -> None:
        passes = loop_pass.current()
        passes.defer(DISPATCH, boom)
        passes.defer(DISPATCH, lambda: seen.append("dispatch"))
        passes.defer(FLUSH, lambda: seen.append("flush"))

    with caplog.at_level(logging.ERROR, logger="magnetar.broker.loop_pass"):
        run(loop, body, lambda: "flush" in seen)
    assert seen == ["dispatch", "flush"]
    assert "boom" in caplog.text


def test_each_loop_has_its_own_scheduler(loop):
    other = asyncio.new_event_loop()
    try:
        assert loop_pass.for_loop(loop) is loop_pass.for_loop(loop)
        assert loop_pass.for_loop(loop) is not loop_pass.for_loop(other)
    finally:
        other.close()
