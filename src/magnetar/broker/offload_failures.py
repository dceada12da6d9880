"""Reads of offloaded data that failed (the object store down or slow): counted for /metrics and
said in the log at most once every ``LOG_INTERVAL_S`` (a dispatcher tries again every
``OFFLOAD_RETRY_S`` while the store is down, and must not flood the log)."""

from __future__ import annotations

import logging

from magnetar.broker.throttled_counts import ThrottledCounts

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0
#: How long a dispatcher whose read of offloaded data failed waits before it reads again.
OFFLOAD_RETRY_S = 1.0


class OffloadReadFailures:
    def __init__(self) -> None:
        self._counts = ThrottledCounts(("read",), LOG_INTERVAL_S)

    @property
    def count(self) -> int:
        return self._counts.counts["read"]

    def failed(self, detail: str) -> None:
        since = self._counts.count("read")
        if since is not None:
            log.error(
                "reading offloaded data failed: %s; %d failure(s) since the last line like this"
                " (local data is served meanwhile; the read is tried again)",
                detail,
                since,
            )


OFFLOAD_READ_FAILURES = OffloadReadFailures()
