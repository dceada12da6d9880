"""Which partition a keyed message goes to: Pulsar's hashing schemes, as its clients compute them.

A producer on a partitioned topic hashes a message's partition key and takes the hash modulo the
partition count; every client that writes to the same topic has to agree, or one key's messages
end up on two partitions and lose their order. The schemes are the C++ client's ``HashingScheme``
(``ProducerConfiguration.h``), enum values included:

- ``BoostHash`` (1): ``boost::hash<std::string>`` of the key's UTF-8 bytes. The C++ client's
  default, and so the official Python client's (3.13 offers no other). Boost 1.82 and later hash a
  char range with ``mulxp1_hash``; that is what the official wheel computes (established by
  experiment, docs/client.md "Routing").
- ``JavaStringHash`` (2): Java's ``String.hashCode()`` over UTF-16 code units, the Java client's
  default. (The C++ client's version sums the UTF-8 bytes as signed chars instead, which agrees
  with Java for ASCII keys only; we follow Java, whose scheme this is.)
- ``Murmur3_32Hash`` (0): MurmurHash3 x86 32-bit, seed 0, of the UTF-8 bytes (Java and C++ alike).

Every scheme keeps the low 31 bits (``& 0x7FFFFFFF``), so the modulo never sees a negative number.
Pure functions: the client, the Spark sink and the demo all route through ``key_partition``.
"""

from __future__ import annotations

import enum
from typing import Any

import mmh3

_INT31 = 0x7FFFFFFF
_U32 = 0xFFFFFFFF
_U64 = (1 << 64) - 1


class HashingScheme(enum.IntEnum):
    """The C++ client's ``ProducerConfiguration::HashingScheme``, same names and values."""

    Murmur3_32Hash = 0
    BoostHash = 1
    JavaStringHash = 2


#: What the official Python client uses (the C++ client's default).
DEFAULT_HASHING_SCHEME = HashingScheme.BoostHash


def java_string_hash(key: str) -> int:
    """Java's ``key.hashCode() & Integer.MAX_VALUE``: ``h = 31*h + c`` over UTF-16 code units."""
    data = key.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _U32
    return h & _INT31


def murmur3_32_hash(key: str) -> int:
    """MurmurHash3 (x86, 32 bit, seed 0) of the UTF-8 bytes, low 31 bits."""
    return mmh3.hash(key.encode(), 0, signed=False) & _INT31


def _mulx(x: int, y: int) -> int:
    """Boost's ``mulx``: the 128-bit product's low and high halves XORed together."""
    product = x * y
    return (product & _U64) ^ (product >> 64)


_Q = 0x9E3779B97F4A7C15  # Boost's golden-ratio constant
_K = 0xDF442D22CE4859B9  # _Q * _Q, mod 2**64


def boost_hash(key: str) -> int:
    """``boost::hash<std::string>`` (Boost >= 1.82, 64-bit ``size_t``) of the UTF-8 bytes, low 31 bits.

    Boost's ``hash_range`` for a contiguous char range, seed 0: 8-byte little-endian words, then
    a tail of 0..7 bytes folded into one word, each mixed in with ``mulx``."""
    data = key.encode()
    n = len(data)
    w = _mulx(_Q, _K)  # seed 0 + q
    h = w ^ n
    p = 0
    while n >= 8:
        w = (w + _Q) & _U64
        h ^= _mulx((int.from_bytes(data[p : p + 8], "little") + w) & _U64, _K)
        p += 8
        n -= 8
    if n >= 4:
        # Two overlapping 4-byte reads, the last one shifted over the first.
        last = int.from_bytes(data[p + n - 4 : p + n], "little")
        tail = (last << ((n - 4) * 8)) | int.from_bytes(data[p : p + 4], "little")
    elif n >= 1:
        x1 = (n - 1) & 2
        x2 = n >> 1
        tail = (data[p + x1] << (x1 * 8)) | (data[p + x2] << (x2 * 8)) | data[p]
    else:
        tail = 0
    w = (w + _Q) & _U64
    h ^= _mulx((tail + w) & _U64, _K)
    return _mulx((h + w) & _U64, _K) & _INT31


_HASHES = {
    HashingScheme.BoostHash: boost_hash,
    HashingScheme.JavaStringHash: java_string_hash,
    HashingScheme.Murmur3_32Hash: murmur3_32_hash,
}


def hashing_scheme(value: Any) -> HashingScheme:
    """``value`` as a scheme: our enum, its name as a string (``"JavaStringHash"``), or any enum-like
    value whose ``.name`` is one (an official client's ``HashingScheme``). Integers are refused:
    the enums of Pulsar's clients do not agree on the numbers."""
    if isinstance(value, HashingScheme):
        return value
    name = value if isinstance(value, str) else getattr(value, "name", None)
    if isinstance(name, str) and name in HashingScheme.__members__:
        return HashingScheme[name]
    raise ValueError(f"hashing_scheme {value!r}: expected one of {', '.join(HashingScheme.__members__)}")


def key_hash(key: str, scheme: HashingScheme | str = DEFAULT_HASHING_SCHEME) -> int:
    """The non-negative 31-bit hash of ``key`` under ``scheme``."""
    return _HASHES[hashing_scheme(scheme)](key)


def key_partition(key: str, partitions: int, scheme: HashingScheme | str = DEFAULT_HASHING_SCHEME) -> int:
    """The partition (0..partitions-1) a message with partition key ``key`` goes to, as Pulsar's
    clients route it: the scheme's hash modulo the partition count."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, not {partitions}")
    return key_hash(key, scheme) % partitions
