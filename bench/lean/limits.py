"""Raising the open-file limit of a generator process: one descriptor per connection."""

from __future__ import annotations

import resource


def raise_nofile(wanted: int) -> tuple[int, int]:
    """Soft limit up to ``wanted`` (the hard one too where allowed, e.g. as root); returns (soft, hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return soft, hard
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted, wanted
        except (ValueError, OSError):
            pass  # not privileged: the hard limit is as far as it goes
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)
