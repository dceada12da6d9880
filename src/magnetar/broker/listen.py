"""A port the broker cannot listen on, said in one line: which address, which setting, and why.

``OSError: [Errno 98] error while attempting to bind on address ('127.0.0.1', 6650)`` names neither
the setting nor the flag that would fix it; ``magnetar standalone`` prints this line instead and
exits 1 (docs/cli.md: a failure is one line, never a traceback).
"""

from __future__ import annotations

import errno
import os


class ListenError(OSError):
    """A port that cannot be bound (in use, not allowed, an address that is not this host's)."""


#: What a user can do about the usual causes.
_HINTS = {
    errno.EADDRINUSE: "another broker or program listens there",
    errno.EACCES: "ports below 1024 need privileges",
    errno.EADDRNOTAVAIL: "the host is not an address of this machine",
}


def cannot_listen(exc: OSError, host: str, port: int, setting: str) -> ListenError:
    """``exc``, raised binding ``host:port`` for ``setting`` (e.g. ``port (--port)``), as one line."""
    # The errno's own words: uvloop's message repeats the address and asyncio's is a sentence.
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or str(exc))
    hint = _HINTS.get(exc.errno or 0)
    message = f"cannot listen on {host}:{port}, the {setting}: {reason}" + (f" ({hint})" if hint else "")
    return ListenError(message)
