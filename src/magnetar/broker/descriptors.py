"""File descriptors: the process's limit, staying clear of it, and saying so when it is reached.

Every connection is a socket, and every topic and durable subscription holds files open
(docs/configuration.md counts them). When the process has no descriptor left, opening a
topic fails with EMFILE, and so does accepting a connection (which listener.py answers all
the same, on a spare descriptor kept for it: spare_descriptor.py). So the broker keeps
``RESERVE`` descriptors spare: a new connection or topic that would eat into them is refused
with an error the client sees (the refusal itself needs a descriptor, the accepted socket),
logged at most once a minute, and counted in /metrics. New connections are refused only
nearer the limit (``CONNECTION_RESERVE``): a connection costs one descriptor, which it holds
already when the broker sees it, and may well use topics already open.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from collections.abc import Callable

from magnetar.broker.errors import NotAllowed, PersistenceError
from magnetar.broker.throttled_counts import ThrottledCounts

log = logging.getLogger(__name__)


class OutOfDescriptors(NotAllowed):
    """A topic or subscription refused for want of descriptors: NotAllowedError, which the official
    clients do not retry (PersistenceError they retry until their operation timeout, 30 s each),
    so the refusal is prompt; they get it on a later try once descriptors are free."""


#: Descriptors kept spare by refusing to open new topics and subscriptions: for connections,
#: ledger roll-overs, and refusing with an error.
RESERVE = 32
#: Descriptors kept spare by refusing new connections (answering their CONNECT with an error).
CONNECTION_RESERVE = 8
#: At most one log line per this many seconds about running out (with the count in between).
LOG_INTERVAL_S = 60.0
#: What a connection refused for want of descriptors is told (Pulsar's and the HTTP port).
NO_NEW_CONNECTIONS = "the broker is out of file descriptors: no new connections for now"


def raise_soft_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Go programs do); returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft, hard


def soft_limit() -> int:
    """The limit now (it can be changed from outside, e.g. ``prlimit``)."""
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def ledger_file_limit(setting: int) -> int:
    """How many files ledgers may keep open (``max_open_ledger_files``): the setting, but at most
    half the descriptor limit, so that the other half is left for connections and the reserve."""
    limit = min(setting, max(2, soft_limit() // 2))
    if limit < setting:
        log.warning(
            "max_open_ledger_files %d is more than half the file descriptor limit %d: ledgers keep at"
            " most %d files open (docs/configuration.md, File descriptors)",
            setting,
            soft_limit(),
            limit,
        )
    return limit


def is_exhaustion(exc: BaseException) -> bool:
    """True for the errors of a process (EMFILE) or system (ENFILE) out of descriptors."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def in_reserve(fd: int, reserve: int = RESERVE) -> bool:
    """True when descriptor ``fd``, just opened, is among the last ``reserve`` below the limit.

    The kernel hands out the lowest free number, so ``fd`` = n means n descriptors are in
    use below it: cheap to ask, and only ever wrong (with holes below the top) on the side
    of letting something through, which then meets EMFILE and is refused all the same.
    """
    return fd >= soft_limit() - reserve


def reserve_reached() -> bool:
    """True when the next descriptor opened would be in the reserve (or none is left)."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY)
    except OSError as exc:
        if is_exhaustion(exc):
            return True
        raise
    os.close(fd)
    return in_reserve(fd)


#: What a refusal for want of descriptors refused: a new connection, topic or subscription, or
#: a read or write whose ledger files were closed (``max_open_ledger_files``) and could not reopen.
KINDS = ("connection", "topic", "subscription", "read", "write")


class Exhaustion:
    """Refusals for want of descriptors, by what was refused (``KINDS``), with one log line for
    all of them at most every ``LOG_INTERVAL_S`` seconds."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._counts = ThrottledCounts(KINDS, LOG_INTERVAL_S, clock)

    @property
    def counts(self) -> dict[str, int]:
        return self._counts.counts

    def refused(self, what: str, detail: str) -> None:
        since_log = self._counts.count(what, group="descriptors")
        if since_log is not None:
            log.error(
                "out of file descriptors (limit %d, %d kept spare): refused a %s (%s); %d refusal(s) in "
                "all since the last line like this. Raise the limit (ulimit -n, LimitNOFILE=) or lower "
                "the number of topics and connections: see docs/configuration.md, File descriptors",
                soft_limit(),
                RESERVE,
                what,
                detail,
                since_log,
            )


#: The broker's refusals (one process, one limit).
EXHAUSTION = Exhaustion()


def check_reserve(what: str, name: str) -> None:
    """Refuse to open ``what`` (a topic, a subscription) when the descriptors left are the reserve."""
    if reserve_reached():
        EXHAUSTION.refused(what, name)
        raise OutOfDescriptors(f"cannot open {what} {name}: the broker is out of file descriptors")


def storage_error(what: str, name: str, exc: OSError) -> PersistenceError | OutOfDescriptors:
    """The error a client gets when opening ``what``'s files failed with ``exc``."""
    if is_exhaustion(exc):
        EXHAUSTION.refused(what, name)
        return OutOfDescriptors(f"cannot open {what} {name}: the broker is out of file descriptors ({exc})")
    log.error("cannot open %s %s: %s", what, name, exc)
    return PersistenceError(f"cannot open {what} {name}: {exc}")
