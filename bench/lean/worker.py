"""A worker process: its slice of lean consumers on one event loop, driven over a pipe.

The conversation with the coordinator: the worker says ``ready``; on ``go`` it opens its
connections (at most ``concurrency`` being set up at once) and says ``subscribed`` with how long
that took; it says ``done`` when each of its consumers has every message; on ``report`` it sends
its counts and histograms and ends.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

from bench.lean.chunks import ChunkCheck
from bench.lean.connection import LeanConnection, WorkerState
from bench.lean.limits import raise_nofile
from bench.lean.tally import Tally

CONNECT_TIMEOUT_S = 300.0
#: Linux's IP_BIND_ADDRESS_NO_PORT (linux/in.h; the socket module does not name it).
IP_BIND_ADDRESS_NO_PORT = 24


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
    exclusive: bool = False  # one Exclusive subscription per consumer instead of the broadcast one
    stalled_connections: int = 0  # of this worker's connections, how many stall after one message
    chunked: bool = False  # messages come in chunks: check each whole before it counts
    size: int = 0  # bytes per message (the official slice checks what it gets against it)
    lookup: bool = False  # LOOKUP the topic first, as a client does (a spread topic's names this port)


@dataclass(frozen=True)
class Slot:
    """One connection of a worker: its consumers, and where they count."""

    first: int  # worker index of its first consumer (for names)
    count: int
    stalled: bool
    base: int  # index of its first consumer in its tally (the stalled one or the other)


def layout(spec: WorkerSpec) -> list[Slot]:
    """The worker's connections in order; the stalled ones spread evenly among them."""
    starts = range(0, spec.consumers, spec.per_connection)
    total, stall = len(starts), spec.stalled_connections
    slots, bases = [], [0, 0]
    for n, first in enumerate(starts):
        count = min(spec.per_connection, spec.consumers - first)
        stalled = (n + 1) * stall // total > n * stall // total
        slots.append(Slot(first, count, stalled, bases[stalled]))
        bases[stalled] += count
    return slots


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
    slots = layout(spec)
    stalled = sum(slot.count for slot in slots if slot.stalled)
    state = WorkerState(
        topic=spec.topic,
        subscription=spec.subscription,
        name_prefix=spec.name_prefix,
        first_global=spec.first_global,
        tally=Tally(spec.consumers - stalled, spec.messages),
        permits=spec.permits,
        ack_every=spec.ack_every,
        on_complete=done.set,
        exclusive=spec.exclusive,
        stalled_tally=Tally(stalled, spec.messages),
        chunks=ChunkCheck(spec.consumers - stalled) if spec.chunked else None,
        lookup=f"pulsar://127.0.0.1:{spec.port}" if spec.lookup else None,
    )
    pipe.send(("ready", {"loop": loop_name}))
    await _expect(inbox, "go")
    connections: list[LeanConnection] = []
    start = time.monotonic()
    failed, failed_stalled = await _open_all(spec, slots, state, connections)
    pipe.send(
        ("subscribed", {"connect_s": round(time.monotonic() - start, 3), "failed": failed + failed_stalled})
    )
    state.target = spec.consumers - stalled - failed
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
    backlog = [cnx.unread_bytes() for cnx in connections if cnx.stalled]
    for cnx in connections:
        cnx.close()
    loop.remove_reader(pipe.fileno())
    if command[0] == "report":
        pipe.send(("report", _report(spec, state, failed + failed_stalled, backlog)))
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


async def _open_all(
    spec: WorkerSpec, slots: list[Slot], state: WorkerState, connections: list[LeanConnection]
) -> tuple[int, int]:
    """Open every connection, ``concurrency`` at a time; consumers that failed (others, stalled)."""
    loop = asyncio.get_running_loop()
    cursor = iter(range(len(slots)))
    failed = [0, 0]

    async def opener() -> None:
        for n in cursor:
            slot = slots[n]
            first, count = slot.first, slot.count
            source = spec.source_ips[n % len(spec.source_ips)] if spec.source_ips else None
            try:
                _, cnx = await asyncio.wait_for(
                    loop.create_connection(
                        lambda s=slot: LeanConnection(state, s.first, s.count, s.base, s.stalled),
                        sock=await _connected(loop, source, spec.port),
                    ),
                    CONNECT_TIMEOUT_S,
                )
                connections.append(cnx)
                await asyncio.wait_for(cnx.ready, CONNECT_TIMEOUT_S)
                failed[slot.stalled] += cnx.failed
            except (OSError, RuntimeError, TimeoutError, ConnectionError) as exc:
                failed[slot.stalled] += count
                if len(state.errors) < 20:
                    state.errors.append(f"consumers {first}..{first + count - 1}: {exc!r}")

    await asyncio.gather(*(opener() for _ in range(max(1, spec.concurrency))))
    return failed[0], failed[1]


async def _connected(loop: asyncio.AbstractEventLoop, source: str | None, port: int) -> socket.socket:
    """A socket connected to 127.0.0.1:``port`` from ``source`` (None: the kernel's pick).

    From a source address given, the local port is chosen at connect time (``IP_BIND_ADDRESS_NO_PORT``),
    not by the bind: a bind to port 0 searches the address's ports one by one, which with 10,000 of
    them taken cost the generator about 1 ms of kernel time per connection."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        if source is not None:
            sock.setsockopt(socket.IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            sock.bind((source, 0))
        await loop.sock_connect(sock, ("127.0.0.1", port))
    except BaseException:
        sock.close()
        raise
    return sock


def _report(spec: WorkerSpec, state: WorkerState, failed: int, backlog: list[int]) -> dict:
    return {
        "worker": spec.index,
        "kind": "lean",
        "tally": state.tally.summary(),
        "stalled": {
            **state.stalled_tally.summary(),  # type: ignore[union-attr]
            "max_received": max(state.stalled_tally.received, default=0),  # type: ignore[union-attr]
            "unread_kib": round(sum(backlog) / 1024, 1),
        },
        "chunks": state.chunks.summary() if state.chunks is not None else None,
        "failed_consumers": failed,
        "closed_by_broker": state.closed_by_broker,
        "errors": state.errors[:20],
        "from_broker": state.from_broker.to_state(),
        "from_publish": state.from_publish.to_state(),
    }
