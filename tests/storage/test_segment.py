"""The segment files of one ledger: record format, ranged reads and repair after a crash."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from magnetar.storage.errors import CorruptionError
from magnetar.storage.record import HEADER_SIZE, checksum, encode_header, parse_records
from magnetar.storage.segment import PREALLOCATE_MIN_STEP, Segment, segment_paths


def test_record_header_is_length_and_crc32c_big_endian():
    header = encode_header(b"hello")
    length, crc = struct.unpack(">II", header)
    assert length == 5 and crc == checksum(5, b"hello")
    assert parse_records(header + b"hello", 1) == [b"hello"]


def test_zero_bytes_are_never_a_valid_record():
    with pytest.raises(ValueError):
        parse_records(bytes(64), 1)


def _segment_with(tmp_path: Path, datas: list[bytes]) -> Segment:
    segment = Segment.create(tmp_path, 42)
    for data in datas:
        segment.append(data)
    return segment


def test_files_are_named_by_twenty_digit_ledger_id(tmp_path):
    _segment_with(tmp_path, [b"a"]).close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["00000000000000000042.idx", "00000000000000000042.log"]


def test_read_range_with_byte_budget(tmp_path):
    datas = [bytes([i]) * (10 * (i + 1)) for i in range(5)]  # 10, 20, 30, 40, 50 bytes
    segment = _segment_with(tmp_path, datas)
    assert segment.read_range(0, 5) == datas
    assert segment.read_range(1, 3) == datas[1:4]
    assert segment.read_range(0, 5, max_bytes=35) == datas[:2]
    assert segment.read_range(4, 1, max_bytes=1) == datas[4:]  # at least one
    assert segment.read_range(4, 1, max_bytes=1, at_least_one=False) == []
    assert segment.entry_size(2) == 30
    segment.close()


def test_entries_read_back_cannot_be_changed_by_their_reader(tmp_path):
    # Read entries are views of one read's buffer, not copies: a reader that could write
    # through one would change what it shares with the entries read beside it.
    datas = [b"first", b"second", b"third"]
    segment = _segment_with(tmp_path, datas)
    read = segment.read_range(0, 3)
    for entry in read:
        with pytest.raises(TypeError):
            entry[0] = 0
    assert [bytes(entry) for entry in read] == datas
    assert segment.read_range(0, 3) == datas
    segment.close()


def test_reopened_read_only_segment_uses_its_index(tmp_path):
    datas = [b"x" * n for n in (1, 200, 3)]
    _segment_with(tmp_path, datas).close()
    reader = Segment.open_read(tmp_path, 42, 3)
    assert reader.read_range(0, 3) == datas
    reader.close()


def test_read_only_segment_rebuilds_a_lost_index(tmp_path):
    datas = [b"abc", b"defg", b""]
    _segment_with(tmp_path, datas).close()
    segment_paths(tmp_path, 42)[1].unlink()
    reader = Segment.open_read(tmp_path, 42, 3)
    assert reader.read_range(0, 3) == datas
    reader.close()
    # one entry more than the log holds: it is gone, and reads as damaged, the others as they were
    reader = Segment.open_read(tmp_path, 42, 4)
    assert reader.read_salvaging(0, 4) == [*datas, None]
    assert [d.entry_id for d in reader.damage] == [3]
    reader.close()


def test_corrupt_bytes_are_reported_on_read(tmp_path):
    segment = _segment_with(tmp_path, [b"aaaa", b"bbbb"])
    log_path = segment_paths(tmp_path, 42)[0]
    with open(log_path, "r+b") as f:
        f.seek(HEADER_SIZE + 1)
        f.write(b"X")
    with pytest.raises(CorruptionError):
        segment.read_range(0, 1)
    assert segment.read_range(1, 1) == [b"bbbb"]
    segment.close()


def _crash_with(tmp_path: Path, datas: list[bytes]) -> tuple[Path, Path]:
    """Write datas and drop the fds without closing the segment cleanly."""
    segment = _segment_with(tmp_path, datas)
    segment.sync()
    os.close(segment._log_fd)
    os.close(segment._idx_fd)
    return segment_paths(tmp_path, 42)


def test_recover_truncates_a_torn_tail(tmp_path):
    datas = [f"entry-{i}".encode() for i in range(10)]
    log_path, _ = _crash_with(tmp_path, datas)
    size = log_path.stat().st_size
    os.truncate(log_path, size - 3)  # the last record loses its last bytes
    segment = Segment.recover(tmp_path, 42)
    assert segment.entries == 9
    assert segment.read_range(0, 9) == datas[:9]
    assert log_path.stat().st_size == size - HEADER_SIZE - len(datas[9])
    assert segment.append(b"after") == 9
    assert segment.read_range(9, 1) == [b"after"]
    segment.close()


def _corrupt_crc(log_path: Path, record_offset: int) -> None:
    with open(log_path, "r+b") as f:
        f.seek(record_offset + 4)
        f.write(b"\xde\xad\xbe\xef")


def test_recover_drops_a_last_record_with_a_bad_crc(tmp_path):
    datas = [f"entry-{i}".encode() for i in range(10)]
    log_path, _ = _crash_with(tmp_path, datas)
    _corrupt_crc(log_path, 9 * (HEADER_SIZE + len(datas[0])))
    segment = Segment.recover(tmp_path, 42)
    assert segment.entries == 9
    assert segment.read_range(0, 9) == datas[:9]
    segment.close()


def test_recover_keeps_the_records_after_a_bad_crc_past_the_index(tmp_path):
    datas = [f"entry-{i}".encode() for i in range(10)]
    log_path, idx_path = _crash_with(tmp_path, datas)
    size = log_path.stat().st_size
    os.truncate(idx_path, 5 * 8)  # the index lags the log, as after power loss
    record = HEADER_SIZE + len(datas[0])
    _corrupt_crc(log_path, 7 * record)
    segment = Segment.recover(tmp_path, 42)
    # the bad record keeps its entry id, so the two intact ones after it keep theirs
    assert segment.entries == 10
    assert [d.entry_id for d in segment.damage] == [7]
    assert (segment.damage[0].offset, segment.damage[0].size) == (7 * record, record)
    assert log_path.stat().st_size == size  # nothing cut
    assert idx_path.stat().st_size == 10 * 8
    with pytest.raises(CorruptionError):
        segment.read_range(0, 10)
    got = segment.read_salvaging(0, 10)
    assert got[:7] == datas[:7] and got[7] is None and got[8:] == datas[8:]
    segment.close()
    again = Segment.recover(tmp_path, 42)  # the rebuilt index is kept: no new damage found at open
    assert again.entries == 10 and again.damage == []
    again.close()


def test_recover_rebuilds_missing_index_entries_from_the_log(tmp_path):
    datas = [f"entry-{i}".encode() for i in range(10)]
    _, idx_path = _crash_with(tmp_path, datas)
    os.truncate(idx_path, 4 * 8 + 3)  # index lost its tail, and half an offset
    segment = Segment.recover(tmp_path, 42)
    assert segment.entries == 10
    assert idx_path.stat().st_size == 10 * 8
    assert segment.read_range(0, 10) == datas
    segment.close()


def test_recover_walks_back_over_index_entries_that_point_at_garbage(tmp_path):
    datas = [f"entry-{i}".encode() for i in range(10)]
    log_path, idx_path = _crash_with(tmp_path, datas)
    record = HEADER_SIZE + len(datas[0])
    os.truncate(log_path, 7 * record)  # log lost 3 records the index still lists
    with open(idx_path, "ab") as f:
        f.write(bytes(8 * 5))  # and the index grew zeros (an unwritten page)
    segment = Segment.recover(tmp_path, 42)
    assert segment.entries == 7
    assert idx_path.stat().st_size == 7 * 8
    assert segment.read_range(0, 7) == datas[:7]
    segment.close()


def test_recover_creates_missing_files(tmp_path):
    segment = Segment.recover(tmp_path, 7)
    assert segment.entries == 0 and segment.size_bytes == 0
    assert segment.append(b"x") == 0
    segment.close()


def test_close_waits_for_and_then_skips_sync(tmp_path):
    segment = _segment_with(tmp_path, [b"x"])
    assert segment.sync() == 1
    assert segment.synced_entries == 1
    assert segment.close() == 2
    assert segment.sync() == 0
    assert segment.close() == 0


# -- preallocation: zeros written ahead of the data ------------------------------------------


def _log_size(tmp_path: Path, ledger_id: int = 42) -> int:
    return segment_paths(tmp_path, ledger_id)[0].stat().st_size


def test_small_appends_write_zeros_ahead_and_close_cuts_them(tmp_path):
    segment = Segment.create(tmp_path, 42, preallocate=4096)
    datas = [bytes([n]) * 30 for n in range(200)]  # 200 records of 38 bytes: two steps of zeros
    for data in datas:
        segment.append(data)
    data_end = segment.size_bytes
    assert data_end == 200 * (HEADER_SIZE + 30)
    on_disk = _log_size(tmp_path)
    assert data_end < on_disk <= data_end + 4096
    assert segment_paths(tmp_path, 42)[0].read_bytes()[data_end:] == bytes(on_disk - data_end)
    assert segment.read_range(0, 200) == datas
    segment.close()
    assert _log_size(tmp_path) == data_end
    reread = Segment.open_read(tmp_path, 42, 200)
    assert reread.read_range(0, 200) == datas
    reread.close()


def test_entries_large_against_the_step_are_appended_without_zeros(tmp_path):
    segment = Segment.create(tmp_path, 42, preallocate=4096)
    segment.append(b"x" * 1000)  # over 1/64 of the step: its fsync is about its data, not the metadata
    assert _log_size(tmp_path) == segment.size_bytes
    segment.append(b"y")  # small again: zeros from the end on
    assert _log_size(tmp_path) == segment.size_bytes - HEADER_SIZE - 1 + 4096
    segment.close()


def test_recovery_stops_at_the_zeros_and_keeps_appending_after_the_data(tmp_path):
    segment = Segment.create(tmp_path, 42, preallocate=4096)
    datas = [b"a" * 10, b"b" * 20, b"c" * 30]
    for data in datas:
        segment.append(data)
    data_end = segment.size_bytes
    os.close(segment._log_fd)  # a crash: no close, the zeros stay
    os.close(segment._idx_fd)
    assert _log_size(tmp_path) > data_end
    recovered = Segment.recover(tmp_path, 42, preallocate=4096)
    assert recovered.entries == 3 and recovered.size_bytes == data_end
    assert recovered.append(b"d") == 3
    assert recovered.read_range(0, 4) == [*datas, b"d"]
    recovered.close()
    assert _log_size(tmp_path) == data_end + HEADER_SIZE + 1


def test_a_closed_ledger_whose_zeros_were_not_cut_reads_to_its_last_entry(tmp_path):
    """A crash between the ledger's close in the metadata and the truncation of its zeros."""
    segment = _segment_with(tmp_path, [b"first", b"second"])
    segment.close()
    log_path = segment_paths(tmp_path, 42)[0]
    data_end = log_path.stat().st_size
    with open(log_path, "ab") as f:
        f.write(bytes(4096))
    reread = Segment.open_read(tmp_path, 42, 2)
    assert reread.size_bytes == data_end
    assert reread.entry_size(1) == len(b"second")
    assert reread.read_range(0, 2, max_bytes=len(b"firstsecond")) == [b"first", b"second"]
    reread.close()


def test_zeros_ahead_grow_with_the_ledger_and_never_outweigh_it(tmp_path):
    """A quiet topic's ledger holds little in zeros; a busy one's steps grow to the configured size."""
    step = 1024 * 1024
    segment = Segment.create(tmp_path, 42, preallocate=step)
    record = b"r" * 1000
    segment.append(record)
    assert _log_size(tmp_path) == PREALLOCATE_MIN_STEP  # a fresh ledger: the smallest step
    steps = set()
    for _ in range(5000):  # ~5 MB of data
        before = _log_size(tmp_path)
        segment.append(record)
        data_end, on_disk = segment.size_bytes, _log_size(tmp_path)
        if on_disk != before:
            steps.add(on_disk - (data_end - HEADER_SIZE - len(record)))
        assert on_disk - data_end <= max(data_end, PREALLOCATE_MIN_STEP)
    assert min(steps) == PREALLOCATE_MIN_STEP and max(steps) == step
    segment.close()
    assert _log_size(tmp_path) == segment.size_bytes


def test_recover_resynchronises_after_a_damaged_length_past_the_index(tmp_path):
    datas = [f"entry-{i}".encode() * 20 for i in range(10)]
    log_path, idx_path = _crash_with(tmp_path, datas)
    size = log_path.stat().st_size
    record = HEADER_SIZE + len(datas[0])
    os.truncate(idx_path, 0)  # nothing indexed: only a scan finds the records
    with open(log_path, "r+b") as f:  # record 4's length is garbage: its end must be searched for
        f.seek(4 * record)
        f.write(b"\x00\x00\x7f\x13")
    segment = Segment.recover(tmp_path, 42)
    assert segment.entries == 10 and [d.entry_id for d in segment.damage] == [4]
    got = segment.read_salvaging(0, 10)
    assert got[4] is None and [bytes(g) for g in got if g is not None] == datas[:4] + datas[5:]
    assert log_path.stat().st_size == size
    segment.close()
