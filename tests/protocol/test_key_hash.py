"""Pulsar's hashing schemes for partition keys (magnetar.protocol.key_hash), against known values.

``BOOST_PLACEMENTS`` is what the official Python client (pulsar-client 3.13, its default
producer) did on our broker: the partition it sent each key to on a 101- and on a 97-partition
topic (together they pin the hash modulo 9797). Keys of 1 to 26 bytes take every branch of
Boost's tail handling; the others are multi-byte UTF-8. tests/client/test_key_routing.py checks
the same live.
"""

from __future__ import annotations

import pytest

from magnetar.protocol.key_hash import (
    DEFAULT_HASHING_SCHEME,
    HashingScheme,
    boost_hash,
    hashing_scheme,
    java_string_hash,
    key_hash,
    key_partition,
    murmur3_32_hash,
)

BOOST_PLACEMENTS = [
    ("a", 13, 6),
    ("ab", 17, 86),
    ("abc", 91, 39),
    ("abcd", 50, 49),
    ("abcde", 49, 94),
    ("abcdef", 51, 87),
    ("abcdefg", 67, 75),
    ("abcdefgh", 19, 11),
    ("abcdefghi", 51, 21),
    ("abcdefghij", 99, 92),
    ("abcdefghijk", 86, 85),
    ("abcdefghijkl", 100, 83),
    ("abcdefghijklm", 72, 76),
    ("abcdefghijklmn", 75, 53),
    ("abcdefghijklmno", 58, 47),
    ("abcdefghijklmnop", 71, 35),
    ("abcdefghijklmnopq", 100, 59),
    ("abcdefghijklmnopqr", 60, 17),
    ("abcdefghijklmnopqrs", 62, 9),
    ("abcdefghijklmnopqrst", 70, 57),
    ("abcdefghijklmnopqrstu", 100, 86),
    ("abcdefghijklmnopqrstuv", 30, 58),
    ("abcdefghijklmnopqrstuvw", 16, 46),
    ("abcdefghijklmnopqrstuvwx", 29, 17),
    ("abcdefghijklmnopqrstuvwxy", 30, 8),
    ("abcdefghijklmnopqrstuvwxyz", 85, 0),
    ("é", 37, 74),
    ("ü", 24, 81),
    ("ключ", 62, 58),
    ("日本語", 99, 57),
    ("😀", 76, 72),
    ("a😀b", 8, 27),
    ("key-ü-key-ü-key-ü-", 34, 62),
    ("x" * 64, 58, 81),
    ("order-42", 49, 20),
    ("sensor/7/temperature", 59, 67),
]


@pytest.mark.parametrize(("key", "on_101", "on_97"), BOOST_PLACEMENTS)
def test_the_default_puts_keys_where_the_official_python_client_does(key, on_101, on_97):
    assert DEFAULT_HASHING_SCHEME is HashingScheme.BoostHash
    assert key_partition(key, 101) == on_101
    assert key_partition(key, 97) == on_97


def test_boost_hash_values():
    # boost::hash<std::string> (Boost >= 1.82, 64-bit) & INT32_MAX, computed from Boost's definition.
    assert boost_hash("key1") == 2071103098
    assert boost_hash("key2") == 78330853


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("hello", 99162322),  # Java: "hello".hashCode()
        ("keykeykeykeykey1", 434058482),  # overflows 32 bits (pulsar-client-cpp's HashTest)
        ("keykeykey2", 42978643),  # negative as an int32, so masked (HashTest)
        ("", 0),
        ("é", 233),  # one UTF-16 unit, not its two UTF-8 bytes
        ("😀", 0xD83D * 31 + 0xDE00),  # a surrogate pair: two units
    ],
)
def test_java_string_hash_is_string_hashcode_over_utf16_units(key, expected):
    assert java_string_hash(key) == expected


@pytest.mark.parametrize(
    ("key", "expected"),
    # pulsar-client-cpp's HashTest, "same value as Java client"
    [
        ("k1", 2110152746),
        ("k2", 1479966664),
        ("key1", 462881061),
        ("key2", 1936800180),
        ("key01", 39696932),
        ("key02", 751761803),
    ],
)
def test_murmur3_32_hash_matches_pulsars(key, expected):
    assert murmur3_32_hash(key) == expected


@pytest.mark.parametrize("scheme", list(HashingScheme))
def test_every_scheme_is_31_bits_and_spreads_keys(scheme):
    hashes = [key_hash(f"key-{i}", scheme) for i in range(2000)]
    assert all(0 <= h <= 0x7FFFFFFF for h in hashes)
    counts = [0] * 7
    for i in range(2000):
        counts[key_partition(f"key-{i}", 7, scheme)] += 1
    assert min(counts) > 2000 / 7 / 2, counts


def test_schemes_differ_and_the_scheme_decides():
    partitions = {s: [key_partition(f"k{i}", 16, s) for i in range(50)] for s in HashingScheme}
    assert len({tuple(p) for p in partitions.values()}) == 3
    assert key_partition("hello", 1000, "JavaStringHash") == 99162322 % 1000


def test_scheme_names_and_enum_like_values_are_accepted():
    class OfficialLike:  # an enum value of another client: only its name counts
        name = "Murmur3_32Hash"

    assert hashing_scheme("JavaStringHash") is HashingScheme.JavaStringHash
    assert hashing_scheme(HashingScheme.BoostHash) is HashingScheme.BoostHash
    assert hashing_scheme(OfficialLike()) is HashingScheme.Murmur3_32Hash
    # The C++ and Java enums number the schemes differently: a bare number is ambiguous.
    for wrong in ("Crc32", "javastringhash", 2, None):
        with pytest.raises(ValueError, match="hashing_scheme"):
            hashing_scheme(wrong)


def test_partitions_must_be_positive():
    with pytest.raises(ValueError, match="positive"):
        key_partition("k", 0)
