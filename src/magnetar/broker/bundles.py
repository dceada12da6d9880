"""Namespace bundles, Pulsar's unit of ownership, as pure values (no store, no I/O).

A namespace's topics are spread over the 32-bit range of a hash of their full names; the range
is cut at its ``boundaries`` into bundles, each owned by one broker (one worker here). As in
Pulsar (``NamespaceBundles``, ``NamespaceBundleFactory``): the hash is CRC-32 of the full topic
name in UTF-8 (Guava's ``Hashing.crc32()``); N bundles cut the range into ``2**32 // N`` steps,
the last one ending at ``0xffffffff``; every bundle is ``[lower, upper)`` but the last, which
includes ``0xffffffff``; a bundle is named by its range, ``0x00000000_0x40000000``; a split in
two (``range_equally_divide``) cuts at ``lower + (upper - lower) // 2``.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from dataclasses import dataclass
from typing import Any

FULL_LOWER_BOUND = 0x00000000
FULL_UPPER_BOUND = 0xFFFFFFFF
#: Pulsar's defaultNumberOfNamespaceBundles.
DEFAULT_NUMBER_OF_BUNDLES = 4
#: Pulsar's default split algorithm, the only one here.
RANGE_EQUALLY_DIVIDE = "range_equally_divide"


class InvalidBundle(ValueError):
    """A bundle range or a set of boundaries that is not one of the namespace's."""


def topic_hash(full_name: str) -> int:
    """The hash that places a topic in its namespace's range (an unsigned 32-bit value)."""
    return zlib.crc32(full_name.encode())


def format_boundary(value: int) -> str:
    return f"0x{value:08x}"


def parse_boundary(text: str) -> int:
    """``0x40000000`` (or a decimal, as Java's ``Long.decode`` reads both) as an int in range."""
    try:
        value = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise InvalidBundle(f"invalid bundle boundary {text!r}") from None
    if not FULL_LOWER_BOUND <= value <= FULL_UPPER_BOUND:
        raise InvalidBundle(f"bundle boundary {text!r} is outside 0x00000000..0xffffffff")
    return value


@dataclass(frozen=True, slots=True, order=True)
class NamespaceBundle:
    """One bundle: ``[lower, upper)``, or ``[lower, upper]`` when upper is the end of the range."""

    namespace: str
    lower: int
    upper: int

    @property
    def range(self) -> str:
        """Pulsar's bundle range, ``0x00000000_0x40000000``: what the admin paths name."""
        return f"{format_boundary(self.lower)}_{format_boundary(self.upper)}"

    def includes(self, hash_value: int) -> bool:
        if self.upper == FULL_UPPER_BOUND:
            return self.lower <= hash_value <= self.upper
        return self.lower <= hash_value < self.upper

    def can_split(self) -> bool:
        """As Pulsar's ``canSplitBundle``: a range of one or two values is not cut further."""
        return self.upper - self.lower > 1

    def __str__(self) -> str:
        return f"{self.namespace}/{self.range}"

    @classmethod
    def parse(cls, namespace: str, bundle_range: str) -> NamespaceBundle:
        """A bundle named by its range (``0x00000000_0x40000000``), not yet checked against the
        namespace's bundles (``NamespaceBundles.validate``)."""
        lower_text, sep, upper_text = bundle_range.partition("_")
        if not sep:
            raise InvalidBundle(f"invalid bundle range {bundle_range!r}: expected 0x<lower>_0x<upper>")
        lower, upper = parse_boundary(lower_text), parse_boundary(upper_text)
        if upper <= lower:
            raise InvalidBundle(f"invalid bundle range {bundle_range!r}: upper is not above lower")
        return cls(namespace, lower, upper)


def even_boundaries(count: int) -> tuple[int, ...]:
    """``count`` bundles of equal size over the whole range, as Pulsar cuts a new namespace."""
    if count < 1:
        raise InvalidBundle("the number of bundles must be at least 1")
    if count > FULL_UPPER_BOUND:
        raise InvalidBundle(f"the number of bundles must be at most {FULL_UPPER_BOUND}")
    step = (FULL_UPPER_BOUND + 1) // count
    return (*(i * step for i in range(count)), FULL_UPPER_BOUND)


@dataclass(frozen=True, slots=True)
class NamespaceBundles:
    """A namespace's bundles: its sorted boundaries, first 0x00000000, last 0xffffffff."""

    namespace: str
    boundaries: tuple[int, ...]

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2:
            raise InvalidBundle("bundles need at least 2 boundaries")
        if b[0] != FULL_LOWER_BOUND or b[-1] != FULL_UPPER_BOUND:
            raise InvalidBundle(
                f"bundles must cover the whole hash range: first {format_boundary(b[0])},"
                f" last {format_boundary(b[-1])}"
            )
        if any(lower >= upper for lower, upper in itertools.pairwise(b)):
            raise InvalidBundle("bundle boundaries must be strictly increasing")

    @classmethod
    def even(cls, namespace: str, count: int) -> NamespaceBundles:
        return cls(namespace, even_boundaries(count))

    @classmethod
    def from_json(cls, namespace: str, data: dict[str, Any]) -> NamespaceBundles:
        """From Pulsar's BundlesData (``boundaries`` as hex strings; ``numBundles`` alone cuts
        the range evenly, as Pulsar's namespace creation does)."""
        boundaries = data.get("boundaries")
        if boundaries:
            if not isinstance(boundaries, list) or not all(isinstance(x, str) for x in boundaries):
                raise InvalidBundle("boundaries must be a list of strings such as 0x40000000")
            parsed = sorted({parse_boundary(x) for x in boundaries})
            bundles = cls(namespace, tuple(parsed))
            count = data.get("numBundles")
            if count is not None and count != len(bundles):
                raise InvalidBundle(f"numBundles {count} does not match {len(parsed)} boundaries")
            return bundles
        count = data.get("numBundles")
        if isinstance(count, bool) or not isinstance(count, int):
            raise InvalidBundle("bundles need boundaries or numBundles")
        return cls.even(namespace, count)

    def to_json(self) -> dict[str, Any]:
        """Pulsar's BundlesData."""
        return {"boundaries": [format_boundary(x) for x in self.boundaries], "numBundles": len(self)}

    def __len__(self) -> int:
        return len(self.boundaries) - 1

    @property
    def bundles(self) -> list[NamespaceBundle]:
        b = self.boundaries
        return [NamespaceBundle(self.namespace, b[i], b[i + 1]) for i in range(len(self))]

    def bundle_of_hash(self, hash_value: int) -> NamespaceBundle:
        if not FULL_LOWER_BOUND <= hash_value <= FULL_UPPER_BOUND:
            raise ValueError(f"hash {hash_value} is outside the 32-bit range")
        index = min(bisect.bisect_right(self.boundaries, hash_value) - 1, len(self) - 1)
        return NamespaceBundle(self.namespace, self.boundaries[index], self.boundaries[index + 1])

    def find_bundle(self, full_topic_name: str) -> NamespaceBundle:
        """The bundle of a topic of this namespace, by the hash of its full name."""
        return self.bundle_of_hash(topic_hash(full_topic_name))

    def validate(self, bundle: NamespaceBundle) -> None:
        """InvalidBundle unless ``bundle`` is one of these (same namespace, same range)."""
        index = bisect.bisect_left(self.boundaries, bundle.lower)
        if (
            bundle.namespace != self.namespace
            or index >= len(self)
            or self.boundaries[index] != bundle.lower
            or self.boundaries[index + 1] != bundle.upper
        ):
            raise InvalidBundle(f"bundle {bundle.range} is not one of namespace {self.namespace}'s bundles")

    def split(self, bundle: NamespaceBundle) -> tuple[NamespaceBundles, tuple[NamespaceBundle, ...]]:
        """``bundle`` cut in two halves (range_equally_divide): the new bundles and the halves."""
        self.validate(bundle)
        if not bundle.can_split():
            raise InvalidBundle(f"bundle {bundle.range} can't be split further")
        middle = bundle.lower + (bundle.upper - bundle.lower) // 2
        split = NamespaceBundles(self.namespace, tuple(sorted((*self.boundaries, middle))))
        return split, (
            NamespaceBundle(self.namespace, bundle.lower, middle),
            NamespaceBundle(self.namespace, middle, bundle.upper),
        )
