"""Codecs: round trips, and the exact framing Pulsar's clients use for each."""

from __future__ import annotations

import os
import zlib

import lz4.block
import pytest
import snappy
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.client.compression import CompressionType, DecompressionError, compress, decompress

CODECS = [
    CompressionType.NONE,
    CompressionType.LZ4,
    CompressionType.ZLIB,
    CompressionType.ZSTD,
    CompressionType.SNAPPY,
]
SAMPLES = [b"", b"a", b"hello pulsar " * 1000, os.urandom(70_000), bytes(1 << 20)]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
@pytest.mark.parametrize("data", SAMPLES, ids=lambda d: f"{len(d)}B")
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data), len(data)) == data


@settings(max_examples=50, deadline=None)
@given(data=st.binary(max_size=5000), codec=st.sampled_from(CODECS))
def test_round_trip_any_bytes(data, codec):
    assert decompress(codec, memoryview(compress(codec, data)), len(data)) == data


def test_lz4_is_a_raw_block_without_size_prefix():
    data = b"abcd" * 500
    encoded = compress(CompressionType.LZ4, data)
    assert encoded == lz4.block.compress(data, store_size=False)
    assert lz4.block.decompress(encoded, uncompressed_size=len(data)) == data


def test_zlib_is_a_zlib_stream():
    data = b"abcd" * 500
    assert zlib.decompress(compress(CompressionType.ZLIB, data)) == data


def test_zstd_is_one_frame():
    data = b"abcd" * 500
    encoded = compress(CompressionType.ZSTD, data)
    assert encoded[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(encoded) == data


def test_snappy_is_raw_not_framed():
    data = b"abcd" * 500
    assert snappy.uncompress(compress(CompressionType.SNAPPY, data)) == data


def test_decoding_payloads_made_by_the_reference_libraries():
    data = b"the quick brown fox " * 300
    assert decompress(CompressionType.LZ4, lz4.block.compress(data, store_size=False), len(data)) == data
    assert decompress(CompressionType.ZLIB, zlib.compress(data, 9), len(data)) == data
    no_size = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress(CompressionType.ZSTD, no_size, len(data)) == data
    assert decompress(CompressionType.SNAPPY, snappy.compress(data), len(data)) == data


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_wrong_size_or_garbage_raises(codec):
    data = b"xyz" * 100
    with pytest.raises(DecompressionError):
        decompress(codec, compress(codec, data), len(data) + 1)
    with pytest.raises(DecompressionError):
        decompress(codec, b"\x00garbage\xff" * 3, 300)


def test_unknown_codec_raises():
    with pytest.raises(DecompressionError):
        decompress(99, b"", 0)
