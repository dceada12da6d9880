"""Backlog quotas (Pulsar's): how much unacknowledged data a topic may hold, and what happens past it.

Two kinds, each with a limit and a policy: ``destination_storage`` limits the backlog's size
(bytes from the slowest subscription's mark-delete position to the end), ``message_age`` the
age of its oldest message. Past a limit, by policy:

- ``producer_request_hold``: producers are disconnected and refused with
  ProducerBlockedQuotaExceededError, which clients take as "try again later": sends wait;
- ``producer_exception``: the same with ProducerBlockedQuotaExceededException, which clients
  take as final: sends fail;
- ``consumer_backlog_eviction``: the slowest subscriptions lose their oldest messages until the
  topic is within the limit; producers go on.

A namespace's quota of a kind replaces the broker's default of that kind. Pure logic; the
topic and the broker service apply it.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Final, Literal

SIZE = "destination_storage"
AGE = "message_age"
KINDS = (SIZE, AGE)
HOLD: Final = "producer_request_hold"
EXCEPTION: Final = "producer_exception"
EVICTION: Final = "consumer_backlog_eviction"
RetentionPolicy = Literal["producer_request_hold", "producer_exception", "consumer_backlog_eviction"]
POLICIES: tuple[str, ...] = typing.get_args(RetentionPolicy)


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """One kind's quota: ``limit_size`` bytes (size) or ``limit_time`` seconds (age); -1 is none."""

    limit_size: int = -1
    limit_time: int = -1
    policy: str = HOLD

    @classmethod
    def from_json(cls, data: Any) -> BacklogQuota:
        """Pulsar's ``{"limitSize": bytes, "limitTime": seconds, "policy": "..."}`` (``limit`` is the
        old name of ``limitSize``); raises ValueError for anything else."""
        if not isinstance(data, dict):
            raise ValueError('a backlog quota is {"limitSize": bytes, "limitTime": seconds, "policy": ...}')
        size = data.get("limitSize", data.get("limit", -1))
        time = data.get("limitTime", -1)
        policy = data.get("policy", HOLD)
        if not isinstance(size, int) or not isinstance(time, int) or size < -1 or time < -1:
            raise ValueError("limitSize and limitTime must be numbers, -1 for no limit")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}")
        return cls(size, time, policy)

    def to_json(self) -> dict[str, Any]:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy}


def effective_quotas(
    namespace_map: dict[str, dict] | None, defaults: dict[str, BacklogQuota]
) -> dict[str, BacklogQuota]:
    """The quota of each kind that applies: the namespace's where it has one, else the default."""
    quotas = dict(defaults)
    for kind, data in (namespace_map or {}).items():
        quotas[kind] = BacklogQuota.from_json(data)
    return quotas


def exceeded(
    quotas: dict[str, BacklogQuota], backlog_bytes: int, oldest_age_s: float | None
) -> tuple[str, BacklogQuota] | None:
    """The first quota the backlog is past (size before age), with its kind; None if within all."""
    size = quotas.get(SIZE)
    if size is not None and size.limit_size >= 0 and backlog_bytes > size.limit_size:
        return SIZE, size
    age = quotas.get(AGE)
    if age is not None and age.limit_time >= 0 and oldest_age_s is not None and oldest_age_s > age.limit_time:
        return AGE, age
    return None
