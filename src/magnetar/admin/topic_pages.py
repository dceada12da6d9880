"""A namespace's topics as the console lists them: searched and paged on the broker, so a namespace
of 10,000 topics (or 100,000) sends the browser one page of rows, never the whole list.

Pure: names in, a page of names out. A partitioned topic is one row (its partitions folded into
it, as ``pulsar-admin topics list`` is not but Pulsar Manager's topic list is); a stored or loaded
partition whose partitioned topic's metadata is gone stays a row of its own, so nothing stored
is hidden.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from magnetar.protocol.topic_name import PARTITION_SUFFIX

#: The most rows one page may hold, and the page a request without ``limit`` gets.
PAGE_LIMIT = 500
PAGE_DEFAULT = 50


@dataclass(frozen=True, slots=True)
class TopicRow:
    """One row: a topic's full name, and its partition count (0: not partitioned)."""

    name: str
    partitions: int = 0

    def to_json(self) -> dict[str, object]:
        domain, _, rest = self.name.partition("://")
        return {
            "name": self.name,
            "domain": domain,
            "localName": rest.split("/", 2)[-1],
            "partitions": self.partitions,
        }


@dataclass(frozen=True, slots=True)
class Page:
    total: int
    offset: int
    limit: int
    rows: list[TopicRow]


def rows_of(topics: Iterable[str], partitioned: dict[str, int]) -> list[TopicRow]:
    """``topics`` (stored or loaded, partitions included) and ``partitioned`` (a partitioned
    topic's full name: its partition count) as rows sorted by name, each partitioned topic once."""
    rows = {name: TopicRow(name, count) for name, count in partitioned.items()}
    for name in topics:
        base, marker, index = name.rpartition(PARTITION_SUFFIX)
        if marker and index.isdigit() and base in partitioned:
            continue
        rows.setdefault(name, TopicRow(name))
    return [rows[name] for name in sorted(rows)]


def matches(row: TopicRow, search: str) -> bool:
    """Whether ``row``'s name holds ``search``, whatever the case; every word of a search with
    spaces must be there (``"area 7"`` finds ``city-area-17-alerts``)."""
    name = row.name.lower()
    return all(word in name for word in search.lower().split())


def bounds(offset: int, limit: int) -> tuple[int, int]:
    """(offset, limit) made sane: not negative, and at most ``PAGE_LIMIT`` rows."""
    if offset < 0:
        raise ValueError("offset must not be negative")
    if limit < 1:
        raise ValueError("limit must be at least 1")
    return offset, min(limit, PAGE_LIMIT)


def page(rows: list[TopicRow], search: str, offset: int, limit: int) -> Page:
    """The rows matching ``search`` (all for an empty one), from ``offset``, at most ``limit``."""
    offset, limit = bounds(offset, limit)
    found = [row for row in rows if matches(row, search)] if search.strip() else rows
    return Page(len(found), offset, limit, found[offset : offset + limit])
