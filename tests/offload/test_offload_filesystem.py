"""Offloading ledgers to a directory (the filesystem driver, real files) and reading them back."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.broker.offloaded_reads import PatientReader, answered
from magnetar.offload.object_io import OffloadCancelled, OffloadVerifyError
from magnetar.offload.settings import OffloadSettings
from magnetar.storage import Position
from magnetar.storage.errors import OffloadedReadError, OffloadedReadPending
from magnetar.storage.ledger_info import OFFLOADED
from tests.storage.conftest import add_durable, payloads

from .conftest import TOPIC, io_for, objects, offload_all


def _local_logs(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "data" / "ledgers").rglob("*.log") if "cursors" not in str(p))


def test_an_offloaded_ledger_is_one_verified_object_and_reads_back_the_same(open_tiered, offloader, tmp_path):
    ml = open_tiered().open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(10, size=20))
    before = [(e.position, bytes(e.data)) for e in ml.read_entries(Position.EARLIEST, 100)]
    closed = [info.ledger_id for info in ml.ledgers()[:-1]]
    assert offload_all(offloader, ml) == closed
    infos = {info.ledger_id: info for info in ml.ledgers()}
    root = tmp_path / "offloaded"
    assert len(objects(root)) == len(closed)
    for ledger_id in closed:
        offload = infos[ledger_id].offload
        assert offload is not None and offload.state == OFFLOADED and not offload.local_deleted
        obj = root / offload.key
        # the ledger's log, then one 8-byte offset per entry; its CRC32C recorded
        assert (
            obj.stat().st_size
            == offload.object_size
            == infos[ledger_id].size_bytes + 8 * infos[ledger_id].entries
        )
    # the local copy goes only once the deletion lag has passed
    assert ml.delete_offloaded_local(3600) == []
    assert ml.delete_offloaded_local(0) == closed
    assert _local_logs(tmp_path) == [f"{positions[-1].ledger_id:020d}.log"]
    after = [(e.position, bytes(e.data)) for e in ml.read_entries(Position.EARLIEST, 100)]
    assert after == before
    assert ml.read_entry(positions[4]).data == payloads(10, size=20)[4]


def test_offloaded_ledgers_are_read_after_a_restart(open_tiered, offloader, tmp_path):
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(9, size=20))
    offload_all(offloader, ml)
    ml.delete_offloaded_local(0)
    storage.close()
    ml = open_tiered().open_managed_ledger(TOPIC)
    assert [bytes(e.data) for e in ml.read_entries(Position.EARLIEST, 100)] == payloads(9, size=20)
    assert [info.offloaded for info in ml.ledgers()] == [True, True, False]


def test_a_read_that_may_not_wait_is_told_when_the_bytes_are_there(open_tiered, offloader):
    ml = open_tiered(entry_cache_bytes=0).open_managed_ledger(TOPIC)  # nothing read from memory
    positions = add_durable(ml, payloads(9, size=20))
    offload_all(offloader, ml)
    ml.delete_offloaded_local(0)
    woken = []
    ml.on_offloaded_data = lambda: woken.append(True)
    with pytest.raises(OffloadedReadPending) as pending:
        ml.read_entries(Position.EARLIEST, 100, wait=False)
    assert pending.value.ready.wait(5)
    entries: list = []
    while len(entries) < 9:  # each ledger's index, then its data, is fetched once
        start = ml.next_position(entries[-1].position) if entries else Position.EARLIEST
        try:
            entries.extend(ml.read_entries(start, 100, wait=False))
        except OffloadedReadPending as again:
            assert again.ready.wait(5)
    assert [e.position for e in entries] == positions
    assert woken


def test_an_answer_on_the_event_loop_is_computed_again_once_its_offloaded_entries_are_fetched(
    open_tiered, offloader
):
    ml = open_tiered(entry_cache_bytes=0).open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(9, size=20))
    offload_all(offloader, ml)
    ml.delete_offloaded_local(0)
    reader = PatientReader(ml)
    tries = []

    def work() -> list[bytes]:
        tries.append(len(tries))
        return [bytes(reader(position)) for position in positions]

    async def main() -> list[bytes]:
        return await answered(ml, work, "reading every entry")

    assert asyncio.run(main()) == payloads(9, size=20)
    # tried again after each fetch (an index, then the data, of each offloaded ledger), each entry read once
    assert len(tries) > 2 and reader.reads == 9


def test_a_cursor_reads_across_offloaded_and_local_ledgers(open_tiered, offloader):
    ml = open_tiered().open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(12, size=20))
    cursor = ml.open_cursor("sub", "earliest")
    offload_all(offloader, ml)
    ml.delete_offloaded_local(0)
    got = []
    while len(got) < 12:
        got.extend(e.position for e in cursor.read_entries(5))
    assert got == positions
    cursor.mark_delete(positions[7])
    assert cursor.backlog() == 4


def test_retention_deletes_offloaded_ledgers_and_their_objects(open_tiered, offloader, tmp_path):
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(12, size=20))
    offloaded = offload_all(offloader, ml)
    ml.delete_offloaded_local(0)
    assert len(objects(tmp_path / "offloaded")) == 3
    # retention by size counts both tiers: keeping two ledgers' worth drops the oldest offloaded one
    two = sum(info.size_bytes for info in ml.ledgers()[1:3])
    assert ml.trim(retention_time_seconds=0, retention_size_bytes=two) == offloaded[:1]
    assert offloader.sweep_garbage(storage.metadata) == 1
    assert len(objects(tmp_path / "offloaded")) == 2
    assert ml.trim() == offloaded[1:]
    assert offloader.sweep_garbage(storage.metadata) == 2
    assert objects(tmp_path / "offloaded") == []


def test_deleting_a_topic_deletes_its_objects(open_tiered, offloader, tmp_path):
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(9, size=20))
    offload_all(offloader, ml)
    storage.delete_managed_ledger(TOPIC)
    assert offloader.sweep_garbage(storage.metadata) == 2
    assert objects(tmp_path / "offloaded") == []
    assert storage.metadata.offload_garbage() == []


def test_an_offload_a_crash_interrupted_is_given_up_and_done_again(open_tiered, offloader, tmp_path):
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(6, size=20))
    first = ml.ledgers()[0].ledger_id
    # the attempt is recorded, part of the object written, then the process dies
    assert ml.begin_offload(first, "stale/attempt.ledger")
    (tmp_path / "offloaded" / "stale").mkdir(parents=True)
    (tmp_path / "offloaded" / "stale" / "attempt.ledger").write_bytes(b"partial")
    storage.close()
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    assert ml.ledgers()[0].offload is None  # local only again: never counted done
    assert storage.metadata.offload_garbage() == ["stale/attempt.ledger"]
    assert offloader.sweep_garbage(storage.metadata) == 1
    assert objects(tmp_path / "offloaded") == []
    assert offloader.offload_ledger(ml, first)
    assert ml.ledgers()[0].offloaded


def test_an_object_that_does_not_read_back_as_written_fails_verification(offloader, tmp_path):
    log = tmp_path / "ledger.log"
    log.write_bytes(b"x" * 1000)
    size, crc = offloader.io.upload("k/one.ledger", log, 1000, b"\0" * 8)
    offloader.io.verify("k/one.ledger", size, crc)
    (tmp_path / "offloaded" / "k" / "one.ledger").write_bytes(b"y" * 1008)
    with pytest.raises(OffloadVerifyError, match="CRC32C"):
        offloader.io.verify("k/one.ledger", size, crc)
    (tmp_path / "offloaded" / "k" / "one.ledger").write_bytes(b"x" * 10)
    with pytest.raises(OffloadVerifyError, match="holds 10 bytes"):
        offloader.io.verify("k/one.ledger", size, crc)


def test_offloaded_ledgers_without_a_driver_fail_reads_clearly_and_local_ones_go_on(
    open_tiered, offloader, tmp_path
):
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(9, size=20))
    offload_all(offloader, ml)
    ml.delete_offloaded_local(0)
    storage.close()
    from magnetar.storage import Storage, StorageConfig

    bare = Storage(StorageConfig(tmp_path / "data", max_ledger_size_bytes=80))
    try:
        ml = bare.open_managed_ledger(TOPIC)
        with pytest.raises(OffloadedReadError, match="no offload driver is configured"):
            ml.read_entry(positions[0])
        assert ml.read_entry(positions[8]).data == payloads(9, size=20)[8]
    finally:
        bare.close()


def test_an_upload_is_given_up_between_its_chunks_when_asked_and_leaves_no_object(tmp_path):
    settings = OffloadSettings(
        "filesystem", file_system_uri=str(tmp_path / "store"), max_block_size_in_bytes=5 * 1024 * 1024
    )
    io = io_for(settings)
    log = tmp_path / "big.log"
    size = 12 * 1024 * 1024
    log.write_bytes(bytes(size))  # a multipart upload of three chunks
    asked = []

    def cancelled() -> bool:
        asked.append(True)
        return len(asked) > 1  # the broker stops after the first chunk

    try:
        with pytest.raises(OffloadCancelled):
            io.upload("t/00000000000000000001-aa.ledger", log, size, b"", cancelled)
        assert not io.exists("t/00000000000000000001-aa.ledger") and objects(tmp_path / "store") == []
        assert (
            io.upload("t/00000000000000000001-bb.ledger", log, 12 * 1024 * 1024, b"")[0] == 12 * 1024 * 1024
        )
    finally:
        io.close()


def test_a_ledger_whose_local_copy_is_deleted_is_read_from_its_object_not_from_the_entry_cache(
    open_tiered, offloader
):
    ml = open_tiered().open_managed_ledger(TOPIC)  # the default entry cache holds what was added
    add_durable(ml, payloads(9, size=20))
    offload_all(offloader, ml)
    assert ml.read_entries(Position.EARLIEST, 3, wait=False)  # still local, and cached
    ml.delete_offloaded_local(0)
    with pytest.raises(OffloadedReadPending):
        ml.read_entries(Position.EARLIEST, 3, wait=False)  # fetched from the store
    assert [bytes(e.data) for e in ml.read_entries(Position.EARLIEST, 100)] == payloads(9, size=20)
