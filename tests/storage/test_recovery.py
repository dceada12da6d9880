"""Recovery after a crash: every entry whose on_durable fired is there; a torn tail is cut off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from magnetar.storage import Position
from magnetar.storage.record import HEADER_SIZE, scan_records
from magnetar.storage.segment import segment_paths

from .conftest import TOPIC, add_durable, payloads


def _ledger_dir(tmp_path: Path) -> Path:
    (directory,) = (tmp_path / "data" / "ledgers").iterdir()
    return directory


def test_reopen_without_close_keeps_every_durable_entry(open_storage):
    ml = open_storage(max_ledger_size_bytes=200).open_managed_ledger(TOPIC)
    datas = payloads(40, size=30)
    positions = add_durable(ml, datas)
    # no close: a fresh Storage on the same directory plays the restarted process
    recovered = open_storage(max_ledger_size_bytes=200).open_managed_ledger(TOPIC)
    assert [e.data for e in recovered.read_entries(Position.EARLIEST, 100)] == datas
    assert [e.position for e in recovered.read_entries(Position.EARLIEST, 100)] == positions
    assert recovered.last_confirmed == positions[-1]
    (after,) = add_durable(recovered, [b"after restart"])
    assert after > positions[-1]


def _data_end(log_path: Path) -> int:
    """Where the last intact record ends (the file may go on with preallocated zeros)."""
    fd = os.open(log_path, os.O_RDONLY)
    try:
        return max(end for _, end in scan_records(fd, 0, os.fstat(fd).st_size))
    finally:
        os.close(fd)


@pytest.mark.parametrize("preallocate", [0, 4096], ids=["file-ends-with-data", "zeros-follow-data"])
def test_torn_tail_is_truncated_and_appends_continue(open_storage, tmp_path, preallocate):
    ml = open_storage(preallocate_bytes=preallocate).open_managed_ledger(TOPIC)
    datas = payloads(10, size=20)
    positions = add_durable(ml, datas)
    log_path, _ = segment_paths(_ledger_dir(tmp_path), positions[0].ledger_id)
    end = _data_end(log_path)
    assert (log_path.stat().st_size > end) == bool(preallocate)
    if preallocate:  # the last record's tail never reached the disk: zeros where it should be
        with open(log_path, "r+b") as f:
            f.seek(end - 7)
            f.write(bytes(7))
    else:  # the file ends in the middle of the last record
        os.truncate(log_path, end - 7)
    recovered = open_storage(preallocate_bytes=preallocate).open_managed_ledger(TOPIC)
    assert [e.data for e in recovered.read_entries(Position.EARLIEST, 100)] == datas[:9]
    assert recovered.last_confirmed == positions[8]
    assert add_durable(recovered, [b"next"]) == [positions[9]]
    assert recovered.read_entry(positions[9]).data == b"next"


def test_header_torn_in_half_is_truncated(open_storage, tmp_path):
    ml = open_storage().open_managed_ledger(TOPIC)
    datas = payloads(5, size=20)
    positions = add_durable(ml, datas)
    log_path, _ = segment_paths(_ledger_dir(tmp_path), positions[0].ledger_id)
    os.truncate(log_path, 4 * (HEADER_SIZE + 20) + 3)
    recovered = open_storage().open_managed_ledger(TOPIC)
    assert [e.data for e in recovered.read_entries(Position.EARLIEST, 100)] == datas[:4]


def test_bad_crc_at_the_tail_drops_that_record(open_storage, tmp_path):
    ml = open_storage().open_managed_ledger(TOPIC)
    datas = payloads(10, size=20)
    positions = add_durable(ml, datas)
    log_path, _ = segment_paths(_ledger_dir(tmp_path), positions[0].ledger_id)
    with open(log_path, "r+b") as f:
        f.seek(9 * (HEADER_SIZE + 20) + 4)
        f.write(b"\x00\x00\x00\x00")
    recovered = open_storage().open_managed_ledger(TOPIC)
    assert [e.data for e in recovered.read_entries(Position.EARLIEST, 100)] == datas[:9]


def test_clean_close_and_repeated_recovery_change_nothing(open_storage):
    storage = open_storage(max_ledger_size_bytes=100)
    datas = payloads(20, size=25)
    positions = add_durable(storage.open_managed_ledger(TOPIC), datas)
    storage.close()
    for _ in range(3):
        storage = open_storage(max_ledger_size_bytes=100)
        ml = storage.open_managed_ledger(TOPIC)
        assert [e.data for e in ml.read_entries(Position.EARLIEST, 100)] == datas
        assert ml.last_confirmed == positions[-1]
        storage.close()
    infos = open_storage().open_managed_ledger(TOPIC).ledgers()
    assert sum(i.entries for i in infos) == 20 and all(i.closed for i in infos[:-1])


def test_segment_files_a_trim_left_are_removed_and_unknown_data_is_moved_aside(open_storage, tmp_path):
    ml = open_storage(max_ledger_size_bytes=1).open_managed_ledger(TOPIC)
    add_durable(ml, [b"x", b"y"])  # one ledger each (rolled over by size)
    ml.trim()  # deletes ledger 0 (consumed, no cursor)
    first = ml.ledgers()[0].ledger_id
    assert first > 0
    directory = _ledger_dir(tmp_path)
    for path in segment_paths(directory, 0):
        path.write_bytes(b"left over by a crash in the middle of a trim")
    for path in segment_paths(directory, 999_999):
        path.write_bytes(b"no ledger row explains this one")
    (tmp_path / "data" / "ledgers" / "orphan-dir").mkdir()
    (tmp_path / "data" / "ledgers" / "orphan-dir" / "data").write_bytes(b"keep me")
    open_storage(max_ledger_size_bytes=1).open_managed_ledger(TOPIC)
    assert not segment_paths(directory, 0)[0].exists()  # retention meant it to go
    assert not segment_paths(directory, 999_999)[0].exists()
    assert not (tmp_path / "data" / "ledgers" / "orphan-dir").exists()
    moved = {p.name.rsplit("-", 1)[0]: p for p in (tmp_path / "data" / "orphaned").iterdir()}
    assert (moved["ledgers+orphan-dir"] / "data").read_bytes() == b"keep me"
    assert sum(1 for name in moved if "999999" in name) == 2


_WRITER = textwrap.dedent(
    """
    import sys
    import threading
    from magnetar.storage import Storage, StorageConfig

    storage = Storage(StorageConfig(sys.argv[1], max_ledger_size_bytes=8192))
    ml = storage.open_managed_ledger("persistent://public/default/crash")
    cursor = ml.open_cursor("sub", "earliest")

    first_durable = threading.Event()  # set after last_confirmed has reached entry 0

    def acked(i):
        def on_durable(position, error):
            if error is None:
                print(i, position.ledger_id, position.entry_id, flush=True)
                if i == 0:
                    first_durable.set()
        return on_durable

    ml.add_entry(b"entry-0" * 4, acked(0))
    i = 1
    while True:  # until the test kills it
        ml.add_entry(b"entry-%d" % i * 4, acked(i))
        i += 1
        if i == 300:
            if not first_durable.wait(30):
                sys.exit("entry 0 was not durable within 30 s")
            cursor.mark_delete(ml.last_confirmed)
            cursor.flush()
    """
)
#: How long the writer may take to acknowledge its 2000 entries (0.2 s here): a bound on a hang.
_WRITER_DEADLINE = 60.0


def test_kill_minus_nine_loses_nothing_that_was_acknowledged(open_storage, tmp_path):
    data_dir = tmp_path / "data"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(data_dir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    acked: list[tuple[int, Position]] = []
    assert proc.stdout is not None
    watchdog = threading.Timer(_WRITER_DEADLINE, proc.kill)  # a stalled writer ends the read loop
    watchdog.start()
    try:
        for line in proc.stdout:
            i, ledger_id, entry_id = map(int, line.split())
            acked.append((i, Position(ledger_id, entry_id)))
            if len(acked) >= 2000:
                break
    finally:
        watchdog.cancel()
    assert len(acked) >= 2000, f"the writer stopped (or stalled {_WRITER_DEADLINE} s) after {len(acked)} acks"
    os.kill(proc.pid, signal.SIGKILL)
    rest = proc.stdout.read()  # through the same buffered reader, so no line is skipped
    proc.wait(timeout=10)
    for line in rest.split("\n")[:-1]:  # a line the kill cut short was never finished
        i, ledger_id, entry_id = map(int, line.split())
        acked.append((i, Position(ledger_id, entry_id)))
    assert proc.returncode == -signal.SIGKILL

    ml = open_storage(max_ledger_size_bytes=8192).open_managed_ledger("persistent://public/default/crash")
    assert len(ml.ledgers()) > 2
    for i, position in acked:
        assert ml.read_entry(position).data == b"entry-%d" % i * 4
    everything = ml.read_entries(Position.EARLIEST, 1_000_000)
    assert [e.data for e in everything[: len(acked)]] == [b"entry-%d" % i * 4 for i, _ in acked]
    cursor = ml.cursors()["sub"]
    assert cursor.mark_delete_position >= acked[0][1]
    consumed = ml.number_of_entries(Position.EARLIEST, cursor.mark_delete_position)
    assert cursor.backlog() == len(everything) - consumed


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_only_the_always_policy_writes_zeros_ahead(open_storage, tmp_path, policy):
    ml = open_storage(fsync_policy=policy, fsync_interval_ms=1).open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(10, size=20))
    log_path, _ = segment_paths(_ledger_dir(tmp_path), positions[0].ledger_id)
    assert (log_path.stat().st_size > _data_end(log_path)) == (policy == "always")


def test_a_worker_s_storage_leaves_directories_it_does_not_know_alone(open_storage, tmp_path):
    """``check_directories=False`` (a broker worker): a directory another worker has just made,
    whose row this process has not read, is neither moved aside nor refused."""
    add_durable(open_storage().open_managed_ledger(TOPIC), [b"x"])
    (tmp_path / "data" / "ledgers" / "made-by-another-worker").mkdir()
    worker = open_storage(check_directories=False)
    assert [e.data for e in worker.open_managed_ledger(TOPIC).read_entries(Position.EARLIEST, 10)] == [b"x"]
    assert (tmp_path / "data" / "ledgers" / "made-by-another-worker").is_dir()
    assert not (tmp_path / "data" / "orphaned").exists()
