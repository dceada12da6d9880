"""Offloading to S3: obstore's S3 client against a real S3 protocol server (moto) on 127.0.0.1,
including the store being unreachable during reads and offloads."""

from __future__ import annotations

import pytest

from magnetar.offload.object_io import OffloadCancelled
from magnetar.offload.offloader import LedgerOffloader
from magnetar.storage import Position
from magnetar.storage.errors import OffloadedReadError
from tests.storage.conftest import add_durable, payloads
from tests.waiting import eventually

from .conftest import TOPIC, offload_all, s3_settings

pytestmark = pytest.mark.slow


@pytest.fixture
def s3_offloader(s3_server, tmp_path):
    offloader = LedgerOffloader(s3_settings(s3_server, tmp_path))
    yield offloader
    offloader.close()


def test_ledgers_offloaded_to_s3_read_back_in_ranges(open_tiered, s3_offloader):
    # small blocks: each read is a range of the object, never the whole of it
    storage = open_tiered(io=s3_offloader.io, offload_read_block_bytes=64, offload_prefetch_blocks=0)
    ml = storage.open_managed_ledger(TOPIC)
    data = payloads(30, size=60)
    positions = add_durable(ml, data)
    offloaded = offload_all(s3_offloader, ml)
    assert len(offloaded) == len(ml.ledgers()) - 1 > 5
    assert all(s3_offloader.io.exists(info.offload.key) for info in ml.ledgers()[:-1] if info.offload)
    ml.delete_offloaded_local(0)
    storage.close()
    ml = open_tiered(
        io=s3_offloader.io, offload_read_block_bytes=64, offload_prefetch_blocks=0
    ).open_managed_ledger(TOPIC)
    got = ml.read_entries(Position.EARLIEST, 100)
    assert [bytes(e.data) for e in got] == data and [e.position for e in got] == positions
    object_size = ml.ledgers()[0].offload.object_size
    figures = ml._tiered.figures
    assert figures.fetches > len(offloaded) and figures.fetched_bytes < object_size * len(offloaded) * 2


def test_an_unreachable_store_fails_offloaded_reads_clearly_while_local_reads_go_on(
    open_tiered, s3_offloader, s3_server
):
    ml = open_tiered(
        io=s3_offloader.io, entry_cache_bytes=0, offload_read_retry_seconds=0.5
    ).open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(9, size=20))
    offload_all(s3_offloader, ml)
    ml.delete_offloaded_local(0)
    s3_server.pause()
    try:
        with pytest.raises(OffloadedReadError, match="offloaded data"):
            ml.read_entry(positions[0])
        # at once for a while after a failure, without asking the store again
        with pytest.raises(OffloadedReadError, match="cannot be read"):
            ml.read_entry(positions[1])
        assert bytes(ml.read_entry(positions[8]).data) == payloads(9, size=20)[8]  # the open ledger is local
    finally:
        s3_server.resume()

    def reads_again() -> bool:
        try:
            return bytes(ml.read_entry(positions[0]).data) == payloads(9, size=20)[0]
        except OffloadedReadError:
            return False  # still within the pause after the failure

    eventually(reads_again, what="offloaded data read again once the store is back")


def test_an_offload_while_the_store_is_unreachable_is_given_up_and_retried(
    open_tiered, s3_offloader, s3_server, caplog
):
    caplog.set_level("DEBUG")
    storage = open_tiered(io=s3_offloader.io)
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(6, size=20))
    first = ml.ledgers()[0].ledger_id
    s3_server.pause()
    try:
        with pytest.raises(Exception):  # noqa: B017 (obstore's error, whichever it is)
            s3_offloader.offload_ledger(ml, first)
    finally:
        s3_server.resume()
    assert ml.ledgers()[0].offload is None  # local only: the attempt did not count
    assert s3_offloader.figures.errors == 1 and "Error" in s3_offloader.figures.last_error
    [stale] = storage.metadata.offload_garbage()
    assert s3_offloader.offload_ledger(ml, first)
    assert ml.ledgers()[0].offloaded
    assert s3_offloader.sweep_garbage(storage.metadata) == 1
    assert not s3_offloader.io.exists(stale)
    # the credentials (from a file) are in no log line, nor in the settings' description
    assert "not-a-secret" not in caplog.text and "magnetar-test" not in caplog.text
    assert "not-a-secret" not in s3_offloader.settings.describe() + repr(s3_offloader.settings)


def test_closing_the_offloader_gives_up_an_upload_under_way_without_waiting_for_it(
    open_tiered, s3_server, tmp_path
):
    # A store that hangs for longer than anyone waits at a shutdown.
    offloader = LedgerOffloader(s3_settings(s3_server, tmp_path, timeout_seconds=30.0))
    storage = open_tiered(io=offloader.io)
    ml = storage.open_managed_ledger(TOPIC)
    add_durable(ml, payloads(6, size=20))
    first = ml.ledgers()[0].ledger_id
    s3_server.pause()
    try:
        running = offloader.submit(offloader.offload_ledger, ml, first)
        eventually(lambda: ml.ledgers()[0].offload is not None, what="the attempt recorded")
        assert not offloader.close(wait_seconds=0.5)  # it is inside a request: not waited for
        assert ml.ledgers()[0].offload.state == "offloading"
    finally:
        s3_server.resume()
    with pytest.raises(OffloadCancelled):
        running.result(timeout=30)  # the request ends, and the attempt is given up, not committed
    assert ml.ledgers()[0].offload is None and not ml.ledgers()[0].offloaded
    assert offloader.figures.cancelled == 1 and offloader.figures.errors == 0
    assert len(storage.metadata.offload_garbage()) == 1  # its object (if any) goes with the sweep
