"""How far a stream is behind: Kafka's ``{min,max,avg}OffsetsBehindLatest`` from a query's progress.

PySpark 4.3's Python stream reader cannot put custom metrics into the progress (Spark's
``PythonMicroBatchStream`` does not implement ``ReportsSourceMetrics``; docs/spark.md), but it
does report the latest offsets (``reportLatestOffset``), which Spark puts in the progress next to
the batch's end offset. These functions compute the Kafka source's numbers from the two.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def offsets_behind_latest(consumed: Mapping[str, int], latest: Mapping[str, int]) -> dict[str, str]:
    """Per partition ``latest - consumed``; the min, max and average as strings, as Kafka's source
    reports them; empty when no partition has both offsets known (non-negative)."""
    behind = [
        max(0, latest[t] - consumed[t])
        for t in latest
        if t in consumed and latest[t] >= 0 and consumed[t] >= 0
    ]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }


def source_lag(source_progress: Any) -> dict[str, str]:
    """``offsets_behind_latest`` of one entry of ``StreamingQueryProgress.sources`` (a
    ``SourceProgress`` or its dict from ``progress.json``): its endOffset against its latestOffset."""

    def field(name: str) -> Any:
        if isinstance(source_progress, Mapping):
            return source_progress.get(name)
        return getattr(source_progress, name, None)

    end, latest = _offsets(field("endOffset")), _offsets(field("latestOffset"))
    return offsets_behind_latest(end, latest) if end and latest else {}


def _offsets(raw: Any) -> dict[str, int]:
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() not in ("", "null") else None
    return dict(raw) if isinstance(raw, Mapping) else {}
