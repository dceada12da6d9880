"""Lost metadata: Storage refuses to open and touches nothing; ``repair`` rebuilds it from the files."""

from __future__ import annotations

import pytest

from magnetar.storage import Position, Storage, StorageConfig
from magnetar.storage.errors import MetadataMissingError
from magnetar.storage.repair import repair

from .conftest import TOPIC, add_durable


def _all_files(data_dir) -> dict[str, bytes]:
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in data_dir.rglob("*") if p.is_file()}


def _lose_metadata(data_dir) -> None:
    for path in data_dir.glob("metadata.sqlite*"):
        path.unlink()


def test_storage_refuses_to_open_without_its_metadata_and_changes_nothing(tmp_path):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir, max_ledger_size_bytes=1)) as storage:
        add_durable(storage.open_managed_ledger(TOPIC), [b"a", b"b"])
    _lose_metadata(data_dir)
    before = _all_files(data_dir)
    with pytest.raises(MetadataMissingError, match="magnetar repair --data-dir"):
        Storage(StorageConfig(data_dir))
    assert _all_files(data_dir) == before
    (data_dir / "metadata.sqlite").touch()  # an empty database is no better
    with pytest.raises(MetadataMissingError, match="knows no managed ledger"):
        Storage(StorageConfig(data_dir))
    ledger_files = {k: v for k, v in _all_files(data_dir).items() if k.startswith("ledgers/")}
    assert ledger_files == before


def test_repair_brings_back_ledgers_and_cursors(tmp_path):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir, max_ledger_size_bytes=1)) as storage:
        ml = storage.open_managed_ledger(TOPIC)
        positions = add_durable(ml, [b"m%d" % i for i in range(5)])  # a ledger each
        ml.open_cursor("sub", "earliest").mark_delete(positions[1])
        highest = ml.current_ledger_id
    _lose_metadata(data_dir)

    report = repair(data_dir)
    assert report.topics == [TOPIC] and report.rebuilt_store and not any("sub" in x for x in report.lost)
    with Storage(StorageConfig(data_dir, max_ledger_size_bytes=1)) as storage:
        ml = storage.open_managed_ledger(TOPIC)
        assert [e.data for e in ml.read_entries(Position.EARLIEST, 10)] == [b"m%d" % i for i in range(5)]
        assert ml.cursors()["sub"].mark_delete_position == positions[1]
        assert storage.metadata.allocate_ledger_id() > highest  # no id is handed out twice
    assert repair(data_dir).topics == []  # nothing left to do


def test_repair_moves_a_cursor_ledger_without_a_name_aside(tmp_path):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir)) as storage:
        ml = storage.open_managed_ledger(TOPIC)
        add_durable(ml, [b"x"])
        ml.open_cursor("sub", "earliest")
    (name_file,) = data_dir.glob("ledgers/*/cursors/*.name")
    name_file.unlink()  # as a cursor ledger written before names were recorded
    _lose_metadata(data_dir)
    report = repair(data_dir)
    assert any("no recorded subscription name" in line for line in report.lost)
    assert not list(data_dir.glob("ledgers/*/cursors/*.log"))
    assert len(list((data_dir / "orphaned").iterdir())) == 2  # its .log and .idx, kept
    with Storage(StorageConfig(data_dir)) as storage:
        ml = storage.open_managed_ledger(TOPIC)
        assert ml.cursors() == {} and [e.data for e in ml.read_entries(Position.EARLIEST, 10)] == [b"x"]


def test_a_deletion_a_crash_interrupted_is_finished_and_nothing_else_goes(tmp_path):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir)) as storage:
        add_durable(storage.open_managed_ledger(TOPIC), [b"keep"])
        add_durable(storage.open_managed_ledger(TOPIC + "-gone"), [b"gone"])
    (gone,) = [p for p in (data_dir / "ledgers").iterdir() if p.name.endswith("-gone")]
    gone.rename(gone.with_name(gone.name + ".deleting"))  # a crash right after the rename
    with Storage(StorageConfig(data_dir)) as storage:
        assert storage.managed_ledger_names() == [TOPIC]
        assert [e.data for e in storage.open_managed_ledger(TOPIC).read_entries(Position.EARLIEST, 5)] == [
            b"keep"
        ]
    assert sorted(p.name for p in (data_dir / "ledgers").iterdir()) == [gone.name.rsplit("-", 1)[0]]


def test_a_cursor_ledger_gets_its_name_file_when_it_is_opened(tmp_path):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir)) as storage:
        storage.open_managed_ledger(TOPIC).open_cursor("sub")
    (name_file,) = data_dir.glob("ledgers/*/cursors/*.name")
    name_file.unlink()  # as a cursor ledger written before names were recorded
    with Storage(StorageConfig(data_dir)) as storage:
        storage.open_managed_ledger(TOPIC)
    assert name_file.read_text() == "sub"
