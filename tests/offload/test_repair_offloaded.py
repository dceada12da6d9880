"""``magnetar repair`` after the metadata store was lost, with tiered storage: the ledgers whose
only copy is offloaded are found again in the object store (a directory through the filesystem
driver, real files), verified record by record, and recorded where they live."""

from __future__ import annotations

import shutil

from magnetar.offload.recovery import StoreRecovery
from magnetar.storage import Position
from magnetar.storage.repair import repair
from tests.storage.conftest import add_durable, payloads

from .conftest import TOPIC, objects, offload_all

OTHER = "persistent://public/default/doorbells"


def _lose_metadata(data_dir) -> None:
    for path in data_dir.glob("metadata.sqlite*"):
        path.unlink()


def test_repair_finds_offloaded_ledgers_in_the_store_and_reads_them_back(open_tiered, offloader, tmp_path):
    data_dir, store = tmp_path / "data", tmp_path / "offloaded"
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    positions = add_durable(ml, payloads(12, size=20))
    ml.open_cursor("sub", "earliest").mark_delete(positions[4])
    offloaded = offload_all(offloader, ml)
    ml.delete_offloaded_local(0)  # their only copy is in the store now
    other = storage.open_managed_ledger(OTHER)
    add_durable(other, payloads(9, size=20, tag="d"))
    offload_all(offloader, other)
    other_dir = other.directory
    storage.close()
    # A copy of one object under another attempt's key (a commit the lost metadata held), and a
    # damaged one: the first is a duplicate, the second does not read back.
    first = objects(store)[0]
    copy = first.with_name(first.name.split("-")[0] + "-00000000000000aa.ledger")
    shutil.copy(first, copy)
    damaged = first.with_name(first.name.split("-")[0] + "-00000000000000bb.ledger")
    data = bytearray(first.read_bytes())
    data[10] ^= 0xFF
    damaged.write_bytes(bytes(data))
    shutil.rmtree(other_dir)  # every ledger of this one offloaded, and its directory lost too
    _lose_metadata(data_dir)

    report = repair(data_dir, StoreRecovery(offloader.io))

    assert sorted(report.topics) == sorted([TOPIC, OTHER])
    assert any(f"{len(offloaded)} in the object store only" in line for line in report.lines), report.lines
    assert any("does not read back" in line and damaged.name in line for line in report.lost), report.lost
    assert any(OTHER in line and "subscriptions" in line for line in report.lost)
    storage = open_tiered()
    ml = storage.open_managed_ledger(TOPIC)
    assert [bytes(e.data) for e in ml.read_entries(Position.EARLIEST, 100)] == payloads(12, size=20)
    infos = ml.ledgers()
    assert [info.ledger_id for info in infos if not info.local] == offloaded
    assert all(info.offloaded for info in infos[:-1])
    assert ml.cursors()["sub"].mark_delete_position == positions[4]
    other = storage.open_managed_ledger(OTHER)
    # its offloaded ledgers (the open one's entries were in the directory lost)
    assert [bytes(e.data) for e in other.read_entries(Position.EARLIEST, 100)] == payloads(9, 20, "d")[:6]
    # one of the two copies is recorded, the other queued for deletion; the damaged one is left
    copies = {str(first.relative_to(store)), str(copy.relative_to(store))}
    garbage = storage.metadata.offload_garbage()
    assert len(garbage) == 1 and {*garbage, infos[0].offload.key} == copies
    assert damaged.exists()
    assert repair(data_dir, StoreRecovery(offloader.io)).topics == []  # nothing left to do
