"""Districts (``--districts N``, N >= 2), pure: which district an area belongs to, what central
received from each district (exactly once?), and each district's line of the summary.

Each district runs its own edge broker (cluster ``district-K``); the city's areas are dealt to the
districts in turn (area-1 to district-1, area-2 to district-2, ...), so every district has areas.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

CENTRAL = "central"


def district_name(index: int) -> str:
    """The cluster name of the ``index``-th district (from 0): ``district-1``, ``district-2``, ..."""
    return f"district-{index + 1}"


def district_names(districts: int) -> list[str]:
    return [district_name(i) for i in range(districts)]


def districts_of_areas(areas: Sequence[str], districts: int) -> dict[str, str]:
    """Area -> district: dealt in turn, so with ``districts <= len(areas)`` each has at least one."""
    return {area: district_name(i % districts) for i, area in enumerate(areas)}


@dataclass
class Arrivals:
    """What central received from the districts: per district, every stored message seen (by its
    message id, so a redelivery of one message is not a duplicate) and each reading's identity."""

    message_ids: dict[str, set[Hashable]] = field(default_factory=dict)
    readings: dict[str, Counter] = field(default_factory=dict)

    def add(self, district: str, message_id: Hashable, reading: Hashable) -> None:
        """One message from ``district``; ``reading``: what makes the reading unique (its device,
        kind and event time). A message id seen before (a redelivery) is not counted again."""
        seen = self.message_ids.setdefault(district, set())
        if message_id in seen:
            return
        seen.add(message_id)
        self.readings.setdefault(district, Counter())[reading] += 1

    def total(self, district: str) -> int:
        """Messages stored at central from ``district``, duplicates included."""
        return sum(self.readings.get(district, Counter()).values())

    def unique(self, district: str) -> int:
        return len(self.readings.get(district, Counter()))


@dataclass(frozen=True)
class Lag:
    """A district's replication lag to central, from its edge's topic stats (summed over the
    telemetry topic's partitions): when the traffic stopped, and how long it took to drain."""

    backlog_at_end: int
    delay_at_end_s: float
    drained_within_s: float | None  # None: not drained in time
    backlog_final: int

    def line(self) -> str:
        drained = (
            f"drained within {self.drained_within_s:.2f} s"
            if self.drained_within_s is not None
            else f"NOT drained ({self.backlog_final} left)"
        )
        return (
            f"replicationBacklog {self.backlog_at_end} and replicationDelayInSeconds "
            f"{self.delay_at_end_s:g} when the traffic stopped; {drained}"
        )


@dataclass(frozen=True)
class DistrictReport:
    """One district's part of the summary."""

    name: str
    areas: list[str]
    produced: int  # telemetry events its sensors, vehicles and cameras sent to its edge
    received_total: int  # messages stored at central from it
    received_unique: int  # distinct readings among them
    lag: Lag
    alerts_expected: int  # alerts of its areas
    alerts_back: int  # distinct alerts of its areas its vehicles received at its edge
    vehicles_missing: int  # its vehicles missing an alert of their area

    @property
    def exactly_once(self) -> bool:
        return self.received_total == self.received_unique == self.produced

    @property
    def ok(self) -> bool:
        return (
            self.exactly_once
            and self.lag.drained_within_s is not None
            and self.alerts_back == self.alerts_expected
            and self.vehicles_missing == 0
        )

    def lines(self) -> list[str]:
        once = "exactly once" if self.exactly_once else "NOT exactly once"
        missing = f"; {self.vehicles_missing} vehicles missing alerts" if self.vehicles_missing else ""
        return [
            f"  {self.name:<19} areas {', '.join(self.areas)}: {self.produced:,} events produced at the edge,"
            f" {self.received_unique:,} unique of {self.received_total:,} received at central ({once})",
            f"    replication       {self.lag.line()}",
            f"    alerts back       {self.alerts_back} of {self.alerts_expected} alerts of its areas"
            f" received at the edge{missing}",
        ]
