"""ManagedCursor against a plain model: random adds, reads and acks across small ledgers.

The cursor has fast paths for the common case (reading at the tail, acking the entry right after the
mark-delete position while nothing else is acked); the model knows none of them, so any difference in
what is read, what the mark-delete position is, or what counts as acked shows here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.storage import Position, Storage, StorageConfig

from .conftest import TOPIC

ENTRY = b"e" * 20
# 80-byte ledgers hold three entries, so reads and acks cross ledgers; in 1 MiB ones everything happens
# in the open ledger, where the fast paths apply
LEDGER_BYTES = st.sampled_from([80, 1 << 20])

ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 4)),
        st.tuples(st.just("read"), st.integers(1, 5)),
        st.tuples(st.just("ack"), st.lists(st.integers(0, 40), max_size=4)),  # indexes into what was added
        st.tuples(st.just("ack_next"), st.integers(1, 3)),  # acks the oldest unacked, in order
        st.tuples(st.just("cumulative"), st.integers(0, 40)),
        st.just(("rewind",)),
    ),
    max_size=40,
)


class Model:
    """Entries by index; acked ones; the read pointer as an index."""

    def __init__(self) -> None:
        self.positions: list[Position] = []
        self.acked: set[int] = set()
        self.read_at = 0

    def mark_delete_index(self) -> int:
        """Index of the last entry of the acked prefix, -1 if none."""
        i = 0
        while i in self.acked:
            i += 1
        return i - 1

    def read(self, n: int) -> list[Position]:
        self.read_at = max(self.read_at, self.mark_delete_index() + 1)
        out = []
        i = self.read_at
        while i < len(self.positions) and len(out) < n:
            if i not in self.acked:
                out.append(i)
            i += 1
        if out:
            self.read_at = out[-1] + 1
        return [self.positions[i] for i in out]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LEDGER_BYTES, ops)
def test_cursor_reads_and_acks_as_the_model_says(ledger_bytes, script):
    with tempfile.TemporaryDirectory() as tmp:
        config = StorageConfig(Path(tmp) / "data", max_ledger_size_bytes=ledger_bytes, fsync_policy="never")
        storage = Storage(config)
        try:
            ml = storage.open_managed_ledger(TOPIC)
            cursor = ml.open_cursor("c", "earliest")
            model = Model()
            for op in script:
                if op[0] == "add":
                    for _ in range(op[1]):
                        model.positions.append(ml.add_entry(ENTRY))
                elif op[0] == "read":
                    assert [e.position for e in cursor.read_entries(op[1])] == model.read(op[1])
                elif op[0] == "ack":
                    chosen = [i for i in op[1] if i < len(model.positions)]
                    cursor.delete([model.positions[i] for i in chosen])
                    model.acked.update(chosen)
                elif op[0] == "ack_next":
                    chosen = [i for i in range(len(model.positions)) if i not in model.acked][: op[1]]
                    cursor.delete([model.positions[i] for i in chosen])
                    model.acked.update(chosen)
                elif op[0] == "cumulative":
                    if op[1] < len(model.positions):
                        cursor.mark_delete(model.positions[op[1]])
                        model.acked.update(range(op[1] + 1))
                else:
                    cursor.rewind()
                    model.read_at = 0
                md = model.mark_delete_index()
                if md >= 0:
                    assert cursor.mark_delete_position == model.positions[md]
                elif model.positions:
                    assert cursor.mark_delete_position < model.positions[0]
                assert cursor.individually_deleted_count() == len([i for i in model.acked if i > md])
                assert cursor.backlog() == len(model.positions) - len(model.acked)
                for i, position in enumerate(model.positions):
                    assert cursor.is_acked(position) == (i in model.acked)
        finally:
            storage.close()
