"""A worker process: its slice of lean consumers on one event loop, driven over a pipe.

The conversation with the coordinator: the worker says ``ready``; on ``go`` it opens its
connections (at most ``concurrency`` being set up at once) and says ``subscribed`` with how long
that took; it says ``done`` when each of its consumers has every message; on ``report`` it sends
its counts and histograms and ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from bench.lean.connection import LeanConnection, WorkerState
from bench.lean.limits import raise_nofile
from bench.lean.tally import Tally

CONNECT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    port: int
    topic: str
    subscription: str
    name_prefix: str
    first_global: int  # number of this worker's first consumer over all workers
    consumers: int
    per_connection: int
    messages: int
    permits: int
    ack_every: int
    concurrency: int
    source_ips: tuple[str, ...]  # local addresses to spread connections over (empty: the kernel's pick)


def worker_main(pipe: Connection, spec: WorkerSpec) -> None:
    """Process entry point (spawned)."""
    raise_nofile(spec.consumers + 1024)
    try:
        import uvloop

        uvloop.install()
        loop_name = "uvloop"
    except ImportError:
        loop_name = "asyncio"
    asyncio.run(_run(pipe, spec, loop_name))


async def _run(pipe: Connection, spec: WorkerSpec, loop_name: str) -> None:
    loop = asyncio.get_running_loop()
    inbox: asyncio.Queue[tuple] = asyncio.Queue()
    loop.add_reader(pipe.fileno(), _reader(pipe, inbox))
    done = asyncio.Event()
    state = WorkerState(
        topic=spec.topic,
        subscription=spec.subscription,
        name_prefix=spec.name_prefix,
        first_global=spec.first_global,
        tally=Tally(spec.consumers, spec.messages),
        permits=spec.permits,
        ack_every=spec.ack_every,
        on_complete=done.set,
    )
    pipe.send(("ready", {"loop": loop_name}))
    await _expect(inbox, "go")
    connections: list[LeanConnection] = []
    start = time.monotonic()
    failed = await _open_all(spec, state, connections)
    pipe.send(("subscribed", {"connect_s": round(time.monotonic() - start, 3), "failed": failed}))
    state.target = spec.consumers - failed
    if spec.messages == 0 or state.tally.complete >= state.target:
        done.set()
    waiter = asyncio.create_task(done.wait())
    message = asyncio.create_task(inbox.get())
    finished, _ = await asyncio.wait({waiter, message}, return_when=asyncio.FIRST_COMPLETED)
    if waiter in finished:
        pipe.send(("done", {"at": time.monotonic()}))
        command = await message
    else:
        waiter.cancel()
        command = message.result()
    for cnx in connections:
        cnx.close()
    loop.remove_reader(pipe.fileno())
    if command[0] == "report":
        pipe.send(("report", _report(spec, state, failed)))
    # else: the coordinator is gone ("eof"): nobody to report to


def _reader(pipe: Connection, inbox: asyncio.Queue) -> Callable[[], None]:
    """The pipe's commands into ``inbox``; ("eof",) once, when the coordinator has gone."""

    def read() -> None:
        try:
            inbox.put_nowait(pipe.recv())
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(pipe.fileno())
            inbox.put_nowait(("eof",))

    return read


async def _expect(inbox: asyncio.Queue, name: str) -> tuple:
    command = await inbox.get()
    if command[0] != name:
        raise RuntimeError(f"expected {name!r} from the coordinator, got {command!r}")
    return command


async def _open_all(spec: WorkerSpec, state: WorkerState, connections: list[LeanConnection]) -> int:
    """Open every connection, ``concurrency`` at a time; the number of consumers that failed."""
    loop = asyncio.get_running_loop()
    starts = list(range(0, spec.consumers, spec.per_connection))
    cursor = iter(range(len(starts)))
    failed = 0

    async def opener() -> None:
        nonlocal failed
        for n in cursor:
            first = starts[n]
            count = min(spec.per_connection, spec.consumers - first)
            local = (spec.source_ips[n % len(spec.source_ips)], 0) if spec.source_ips else None
            try:
                _, cnx = await asyncio.wait_for(
                    loop.create_connection(
                        lambda f=first, c=count: LeanConnection(state, f, c),
                        "127.0.0.1",
                        spec.port,
                        local_addr=local,
                    ),
                    CONNECT_TIMEOUT_S,
                )
                connections.append(cnx)
                await asyncio.wait_for(cnx.ready, CONNECT_TIMEOUT_S)
            except (OSError, RuntimeError, TimeoutError, ConnectionError) as exc:
                failed += count
                if len(state.errors) < 20:
                    state.errors.append(f"consumers {first}..{first + count - 1}: {exc!r}")

    await asyncio.gather(*(opener() for _ in range(max(1, spec.concurrency))))
    return failed


def _report(spec: WorkerSpec, state: WorkerState, failed: int) -> dict:
    return {
        "worker": spec.index,
        "kind": "lean",
        "tally": state.tally.summary(),
        "failed_consumers": failed,
        "closed_by_broker": state.closed_by_broker,
        "errors": state.errors[:20],
        "from_broker": state.from_broker.to_state(),
        "from_publish": state.from_publish.to_state(),
    }
