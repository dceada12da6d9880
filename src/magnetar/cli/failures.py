"""A failure is one line on standard error, never a traceback (docs/cli.md): the words for the
errors a user's files, ports and directories cause, shared by the commands."""

from __future__ import annotations


def os_error_text(exc: OSError) -> str:
    """``Permission denied: /path``: the reason, then the path it concerns when there is one."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason}: {exc.filename}" if exc.filename else reason


def one_line(exc: BaseException) -> str:
    """An exception's message on one line (a message of several lines joined)."""
    if isinstance(exc, OSError) and exc.strerror:
        return os_error_text(exc)
    return " ".join(line.strip() for line in str(exc).splitlines()) or type(exc).__name__
