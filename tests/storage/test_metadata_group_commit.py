"""Metadata writes waiting together share one commit; each returns once committed; a bad one fails alone."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from magnetar.storage.metadata_store import MetadataStore
from tests.waiting import eventually


def test_writes_waiting_together_commit_together_and_a_failing_one_fails_alone(tmp_path):
    store = MetadataStore(tmp_path / "m.sqlite")
    store.create_managed_ledger("taken", "taken")
    outcomes: dict[str, object] = {}

    def create(name: str) -> None:
        try:
            outcomes[name] = store.create_managed_ledger(name, name).name
        except sqlite3.IntegrityError as exc:
            outcomes[name] = exc

    names = [f"t{i}" for i in range(8)] + ["taken"]
    with store._commits._lock:  # a commit in progress: the writes queue behind it
        threads = [threading.Thread(target=create, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        eventually(
            lambda: len(store._commits._queue) == len(names), interval=0.001, what="every write queued"
        )
    for thread in threads:
        thread.join(5)
    assert isinstance(outcomes.pop("taken"), sqlite3.IntegrityError)
    assert outcomes == {name: name for name in names[:-1]}
    store.close()
    again = MetadataStore(tmp_path / "m.sqlite")  # every write that returned is on disk
    assert again.managed_ledger_names() == sorted([*names[:-1], "taken"])
    ids = [again.allocate_ledger_id() for _ in range(3)]
    assert ids == sorted(set(ids))
    again.close()


def test_many_threads_writing_at_once_lose_nothing(tmp_path):
    store = MetadataStore(tmp_path / "m.sqlite")
    ml = store.create_managed_ledger("t", "t").ml_id
    ids: list[int] = []

    def work(n: int) -> None:
        for i in range(40):
            store.set_property(ml, f"k{n}-{i}", str(i))
            ids.append(store.allocate_ledger_id())

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(store.properties(ml)) == 240
    assert len(set(ids)) == 240  # no ledger id handed out twice
    store.close()
    with pytest.raises(Exception, match="closed"):
        store.set_property(ml, "late", "x")
