"""``/metrics`` of a broker that is several workers: every worker's series, each with a ``worker``
label, in one scrape of the one admin port.

Each worker's collector reads its own process (its connections, its loaded topics), so a series is
one worker's part: the label keeps the parts apart (``sum by (topic)`` and the like put them
together again, as Prometheus does over Pulsar's brokers with its ``instance`` label). A topic
lives on one worker, so its series appear once. ``magnetar_worker_up`` says which workers answered:
one restarting is 0, and its series are missing from that scrape rather than wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

WORKER_LABEL = "worker"


def parse(text: str) -> list[Metric]:
    """A worker's scrape, as metric families (ValueError if it is not Prometheus' text format)."""
    return list(text_string_to_metric_families(text))


def labelled(families_by_worker: Mapping[str, Iterable[Metric]]) -> list[Metric]:
    """One family per name, holding every worker's samples with the ``worker`` label added, in the
    order the names first appear."""
    merged: dict[str, Metric] = {}
    for worker, families in families_by_worker.items():
        for family in families:
            into = merged.get(family.name)
            if into is None:
                into = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = into
            for sample in family.samples:
                into.samples.append(sample._replace(labels={**sample.labels, WORKER_LABEL: worker}))
    return list(merged.values())


def worker_up(up: Mapping[str, bool]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "magnetar_worker_up",
        "1 for each worker whose metrics this scrape holds, 0 for one that did not answer (restarting)",
        labels=[WORKER_LABEL],
    )
    for worker, answered in up.items():
        family.add_metric([worker], 1 if answered else 0)
    return family


class WorkersCollector(Collector):
    """Yields the merged families of one scrape (made per scrape: it holds that scrape's parts)."""

    def __init__(self, families_by_worker: Mapping[str, Iterable[Metric]], up: Mapping[str, bool]) -> None:
        self._families = labelled(families_by_worker)
        self._up = up

    def collect(self) -> Iterator[Metric]:
        yield from self._families
        yield worker_up(self._up)
