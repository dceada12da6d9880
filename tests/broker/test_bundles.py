"""Namespace bundles as Pulsar cuts them: boundaries, a topic's bundle, splits (pure logic)."""

import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.bundles import (
    FULL_UPPER_BOUND,
    InvalidBundle,
    NamespaceBundle,
    NamespaceBundles,
    even_boundaries,
    topic_hash,
)

hashes = st.integers(min_value=0, max_value=FULL_UPPER_BOUND)
counts = st.integers(min_value=1, max_value=64)


def test_four_bundles_are_pulsars_default_boundaries():
    bundles = NamespaceBundles.even("public/default", 4)
    assert bundles.to_json() == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
    assert [b.range for b in bundles.bundles] == [
        "0x00000000_0x40000000",
        "0x40000000_0x80000000",
        "0x80000000_0xc0000000",
        "0xc0000000_0xffffffff",
    ]


def test_the_hash_is_crc32_of_the_full_name():
    name = "persistent://public/default/my-topic"
    assert topic_hash(name) == zlib.crc32(name.encode())
    bundle = NamespaceBundles.even("public/default", 4).find_bundle(name)
    assert bundle.includes(topic_hash(name))


def test_the_top_of_the_range_is_in_the_last_bundle():
    bundles = NamespaceBundles.even("t/ns", 3)
    assert bundles.bundle_of_hash(FULL_UPPER_BOUND) == bundles.bundles[-1]
    assert bundles.bundle_of_hash(0) == bundles.bundles[0]


@given(counts, hashes)
def test_every_hash_is_in_exactly_one_bundle(count, value):
    bundles = NamespaceBundles.even("t/ns", count)
    holders = [b for b in bundles.bundles if b.includes(value)]
    assert holders == [bundles.bundle_of_hash(value)]


@given(counts)
def test_even_bundles_cover_the_range_in_order(count):
    boundaries = even_boundaries(count)
    assert boundaries[0] == 0 and boundaries[-1] == FULL_UPPER_BOUND
    assert len(boundaries) == count + 1
    assert list(boundaries) == sorted(set(boundaries))


@given(counts, st.data())
def test_a_split_halves_one_bundle_and_keeps_every_topic_in_one_of_its_halves(count, data):
    bundles = NamespaceBundles.even("t/ns", count)
    target = data.draw(st.sampled_from(bundles.bundles))
    split, (low, high) = bundles.split(target)
    assert len(split) == len(bundles) + 1
    assert low.lower == target.lower and high.upper == target.upper and low.upper == high.lower
    assert low.upper == target.lower + (target.upper - target.lower) // 2
    value = data.draw(st.integers(min_value=target.lower, max_value=target.upper))
    if target.includes(value):
        assert split.bundle_of_hash(value) in (low, high)
    others = [b for b in bundles.bundles if b != target]
    assert all(b in split.bundles for b in others)


@given(counts, st.data())
def test_json_round_trips(count, data):
    bundles = NamespaceBundles.even("t/ns", count)
    for _ in range(data.draw(st.integers(min_value=0, max_value=3))):
        bundles = bundles.split(data.draw(st.sampled_from(bundles.bundles)))[0]
    assert NamespaceBundles.from_json("t/ns", bundles.to_json()) == bundles


def test_a_bundle_is_named_by_its_range():
    bundle = NamespaceBundle.parse("t/ns", "0x40000000_0x80000000")
    assert (bundle.lower, bundle.upper) == (0x40000000, 0x80000000)
    assert str(bundle) == "t/ns/0x40000000_0x80000000"
    NamespaceBundles.even("t/ns", 4).validate(bundle)


@pytest.mark.parametrize("text", ["0x40000000", "0x80000000_0x40000000", "0xzz_0x10", "0x0_0x100000000", "_"])
def test_bad_ranges_are_refused(text):
    with pytest.raises(InvalidBundle):
        NamespaceBundle.parse("t/ns", text)


def test_a_range_that_is_not_one_of_the_namespaces_bundles_is_refused():
    bundles = NamespaceBundles.even("t/ns", 4)
    with pytest.raises(InvalidBundle):
        bundles.validate(NamespaceBundle.parse("t/ns", "0x00000000_0x80000000"))
    with pytest.raises(InvalidBundle):
        bundles.validate(NamespaceBundle.parse("other/ns", "0x00000000_0x40000000"))


@pytest.mark.parametrize(
    "data",
    [
        {"boundaries": ["0x00000000", "0x40000000"]},  # not the whole range
        {"boundaries": ["0x00000000"]},
        {"numBundles": 0},
        {},
        {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 2},
    ],
)
def test_bad_bundles_data_is_refused(data):
    with pytest.raises(InvalidBundle):
        NamespaceBundles.from_json("t/ns", data)


def test_the_smallest_bundle_cannot_be_split():
    bundles = NamespaceBundles("t/ns", (0, 1, FULL_UPPER_BOUND))
    with pytest.raises(InvalidBundle, match="can't be split"):
        bundles.split(bundles.bundles[0])
