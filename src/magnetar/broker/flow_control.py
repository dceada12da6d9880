"""Flow control on what clients send: when a connection is not read, and why.

A broker that reads whatever arrives holds, in memory, every send not yet receipted and
every frame not yet written. Like Pulsar's ``ServerCnx`` (which turns Netty's auto-read
off) a connection here stops being read for any of four reasons, and is read again when
none is left:

- ``Hold.WRITES``: the peer does not read what we write (our write buffer is over the
  transport's high-water mark);
- ``Hold.SENDS``: ``max_pending_publish_requests_per_connection`` of its sends await their
  receipts (Pulsar's ``maxPendingPublishRequestsPerConnection``); it is read again once
  half of them are receipted;
- ``Hold.BROKER``: the sends awaiting receipts on all connections hold more than
  ``max_message_publish_buffer_bytes`` (Pulsar's ``maxMessagePublishBufferSizeInMB``);
  every connection is read again once they hold half of it;
- ``Hold.FRAMES``: its next frame is large and the broker's budget for large frames being
  received (``max_incomplete_frame_bytes``, frame_budget.py) has no room for it now; it is
  read again once room is granted to it.

TCP then holds the client back. Nothing is refused and nothing is lost: the frames already
read wait in the connection's decoder and are handled, in order, when the hold ends.
"""

from __future__ import annotations

from collections.abc import Callable


class Hold:
    """The reasons, as bits of ``ReadHolds.held`` (plain ints: they are tested on every frame,
    and ``enum.IntFlag`` arithmetic costs a microsecond a time)."""

    WRITES = 1
    SENDS = 2
    BROKER = 4
    FRAMES = 8
    ALL = (WRITES, SENDS, BROKER, FRAMES)


def no_holds() -> dict[int, int]:
    """A count per reason, all zero."""
    return dict.fromkeys(Hold.ALL, 0)


class ReadHolds:
    """Why a connection is not read: ``pause`` runs as the first reason comes, ``resume`` as the last goes."""

    __slots__ = ("_pause", "_resume", "held", "times")

    def __init__(
        self, pause: Callable[[], None], resume: Callable[[], None], times: dict[int, int] | None = None
    ) -> None:
        #: The reasons holding now, or-ed together (0: the connection is read). Read-only.
        self.held = 0
        self._pause = pause
        self._resume = resume
        #: How often each reason began to hold (a reason already holding is not counted again);
        #: the broker passes one dict for all its connections.
        self.times: dict[int, int] = times if times is not None else no_holds()

    def hold(self, reason: int) -> None:
        held = self.held
        if held & reason:
            return
        self.times[reason] += 1
        self.held = held | reason
        if not held:
            self._pause()

    def release(self, reason: int) -> None:
        held = self.held
        if not held & reason:
            return
        self.held = held & ~reason
        if not self.held:
            self._resume()


class PendingSends:
    """Sends of one connection that await their receipt: full at ``limit``, room again at half.

    ``limit`` 0 means no limit.
    """

    __slots__ = ("count", "limit")

    def __init__(self, limit: int) -> None:
        self.count = 0
        self.limit = limit

    def add(self) -> bool:
        """Count one more; True when that reaches the limit (stop reading)."""
        self.count += 1
        return self.limit > 0 and self.count >= self.limit

    def remove(self) -> bool:
        """Count one less; True when at most half the limit is left (read again)."""
        self.count -= 1
        return self.count <= self.limit // 2


class PublishBuffer:
    """Bytes of the sends awaiting receipts on all connections, against one broker-wide limit.

    ``on_full`` runs when they go over ``limit``; ``on_room`` when they are back at half of it
    or less. ``limit`` 0 means no limit.
    """

    __slots__ = ("bytes", "full", "limit", "on_full", "on_room", "times_full")

    def __init__(self, limit: int, on_full: Callable[[], None], on_room: Callable[[], None]) -> None:
        self.bytes = 0
        self.limit = limit
        self.full = False
        self.times_full = 0
        self.on_full = on_full
        self.on_room = on_room

    def add(self, size: int) -> None:
        self.bytes += size
        if not self.full and self.limit > 0 and self.bytes > self.limit:
            self.full = True
            self.times_full += 1
            self.on_full()

    def remove(self, size: int) -> None:
        self.bytes -= size
        if self.full and self.bytes <= self.limit // 2:
            self.full = False
            self.on_room()
