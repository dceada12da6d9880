"""Start-up's account of the managed-ledger directories (``Storage._check_directories``) runs on a
thread of its own once the metadata store knows managed ledgers (100,000 names compared: the broker
listens meanwhile, issue 40); what depends on it waits for it: an open, a delete, a list of names.
Lost metadata is still refused at once (test_repair.py)."""

from __future__ import annotations

import threading

from magnetar.storage import Position, Storage, StorageConfig

from .conftest import TOPIC, add_durable


def test_the_check_runs_beside_the_start_and_an_open_returns_only_after_it(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir)) as storage:
        add_durable(storage.open_managed_ledger(TOPIC), [b"kept"])
    orphan = data_dir / "ledgers" / "orphan-dir"
    orphan.mkdir()
    gate, real = threading.Event(), Storage._check_directories

    def held(self: Storage) -> None:
        gate.wait(30)
        real(self)

    monkeypatch.setattr(Storage, "_check_directories", held)
    storage = Storage(StorageConfig(data_dir))  # returns with the check held
    try:
        assert orphan.is_dir() and not gate.is_set()
        assert storage.metadata.managed_ledger(TOPIC) is not None  # the metadata serves meanwhile
        seen: list[tuple[bool, list[bytes]]] = []

        def open_and_read() -> None:
            ml = storage.open_managed_ledger(TOPIC)
            seen.append((orphan.exists(), [e.data for e in ml.read_entries(Position.EARLIEST, 5)]))

        opener = threading.Thread(target=open_and_read)
        opener.start()
        gate.set()
        opener.join(30)
        assert seen == [(False, [b"kept"])]  # the orphan was moved aside before the open returned
        assert any(p.name.startswith("ledgers+orphan-dir") for p in (data_dir / "orphaned").iterdir())
    finally:
        gate.set()
        storage.close()


def test_a_storage_closed_before_its_check_ends_waits_for_it(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    with Storage(StorageConfig(data_dir)) as storage:
        add_durable(storage.open_managed_ledger(TOPIC), [b"x"])
    (data_dir / "ledgers" / "orphan-dir").mkdir()
    began, gate, real = threading.Event(), threading.Event(), Storage._check_directories

    def held(self: Storage) -> None:
        began.set()
        gate.wait(30)
        real(self)

    monkeypatch.setattr(Storage, "_check_directories", held)
    storage = Storage(StorageConfig(data_dir))
    assert began.wait(30)
    closing = threading.Thread(target=storage.close)
    closing.start()
    gate.set()
    closing.join(30)
    assert not closing.is_alive()
    # the check finished with the metadata store still open: the orphan was moved, not left half-done
    assert not (data_dir / "ledgers" / "orphan-dir").exists()
