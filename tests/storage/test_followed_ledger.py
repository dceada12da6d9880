"""A followed ledger: another Storage's managed ledger read from the same files as it grows, as a
worker that serves a topic's broadcast consumers without owning the topic reads it."""

from __future__ import annotations

import pytest

from magnetar.storage import Position
from magnetar.storage.errors import ManagedLedgerNotFoundError
from magnetar.storage.followed_ledger import FollowedLedger, ReadOnlyLedgerError
from magnetar.storage.metadata_virtual_cursors import follower_key
from magnetar.storage.virtual_cursors import VirtualCursorState

from .conftest import TOPIC, Durable


def write(ml, payloads: list[bytes]) -> list[Position]:
    durable = Durable()
    for payload in payloads:
        ml.add_entry(payload, durable)
    return [p for p in durable.wait(len(payloads)) if p is not None]


@pytest.fixture
def pair(open_storage):
    """The writer's managed ledger (small ledgers: they roll over) and a follower's view of it."""
    writer = open_storage(max_ledger_size_bytes=300).open_managed_ledger(TOPIC)
    follower_storage = open_storage(check_directories=False)
    return writer, follower_storage


def test_entries_become_readable_as_the_writer_says_they_are_durable(pair):
    writer, storage = pair
    first = write(writer, [b"a", b"b"])
    followed = storage.follow_managed_ledger(TOPIC, "worker-1")
    assert isinstance(followed, FollowedLedger)
    assert followed.read_entries(Position(0, 0), 10) == []  # nothing said durable yet
    assert followed.follow(first[-1])
    assert [bytes(e.data) for e in followed.read_entries(first[0], 10)] == [b"a", b"b"]
    more = write(writer, [b"c"])
    assert followed.last_confirmed == first[-1]  # told nothing of c yet
    followed.follow(more[-1])
    assert bytes(followed.read_entry(more[0]).data) == b"c"
    assert not followed.follow(first[0])  # an older notice changes nothing
    assert followed.last_confirmed == more[-1]


def test_reads_cross_the_ledgers_the_writer_rolled_over_to(pair):
    writer, storage = pair
    followed = storage.follow_managed_ledger(TOPIC, "worker-1")
    payloads = [bytes([65 + i]) * 100 for i in range(12)]  # 300-byte ledgers: several rollovers
    positions = write(writer, payloads)
    assert len({p.ledger_id for p in positions}) > 2
    for position in positions[:5]:  # told one by one, as a link tells it
        followed.follow(position)
    assert [bytes(e.data) for e in followed.read_entries(positions[0], 100)] == payloads[:5]
    followed.follow(positions[-1])  # then past several rollovers at once
    got = followed.read_entries(positions[0], 100)
    assert [e.position for e in got] == positions
    assert [bytes(e.data) for e in got] == payloads
    assert followed.next_position(positions[4]) == positions[5]
    assert followed.number_of_entries(positions[0], positions[-1]) == len(positions)


def test_a_follower_writes_nothing_but_its_own_virtual_cursors(pair):
    writer, storage = pair
    write(writer, [b"x"])
    followed = storage.follow_managed_ledger(TOPIC, "worker-1")
    with pytest.raises(ReadOnlyLedgerError):
        followed.add_entry(b"y")
    with pytest.raises(ReadOnlyLedgerError):
        followed.open_cursor("sub")
    assert followed.trim(0, 0) == []
    store = followed.virtual_cursors("sub")
    assert store.cursor == follower_key("sub", "worker-1")
    store.put("vehicle-1", VirtualCursorState(Position(3, 4)))
    followed.flush_cursors()
    writer.open_cursor("sub")
    owner_store = writer.virtual_cursors("sub")
    owner_store.put("vehicle-2", VirtualCursorState(Position(3, 1)))
    writer.flush_cursors()
    stored = "SELECT DISTINCT cursor FROM place_pages WHERE ml_id = ?"
    keys = {key for (key,) in writer._metadata._commits.query(stored, (writer._id,))}
    assert keys == {"sub", follower_key("sub", "worker-1")}
    assert owner_store.load() == {"vehicle-2": VirtualCursorState(Position(3, 1))}  # not the follower's
    writer.delete_cursor("sub")  # the subscription goes: every worker's virtual cursors with it
    assert writer._metadata._commits.query(stored, (writer._id,)) == []


def test_ledgers_the_writer_trimmed_are_forgotten(pair):
    writer, storage = pair
    positions = write(writer, [bytes([65 + i]) * 100 for i in range(9)])
    followed = storage.follow_managed_ledger(TOPIC, "worker-1")
    followed.follow(positions[2])
    assert followed.read_entries(positions[0], 1)[0].position == positions[0]
    assert writer.trim(0, 0)  # no cursor: every closed ledger goes
    followed.follow(positions[-1])
    followed.refresh()  # the list read again
    assert followed.first_position() == writer.first_position()
    got = followed.read_entries(Position(0, 0), 100)
    assert got and got[0].position == writer.first_position() and got[-1].position == positions[-1]


def test_a_managed_ledger_not_stored_is_not_followed(open_storage):
    storage = open_storage()
    with pytest.raises(ManagedLedgerNotFoundError):
        storage.follow_managed_ledger("persistent://public/default/nowhere", "worker-1")


def test_a_parked_follower_opens_its_files_again(pair):
    writer, storage = pair
    positions = write(writer, [b"p", b"q"])
    followed = storage.follow_managed_ledger(TOPIC, "worker-1")
    followed.follow(positions[-1])
    assert len(followed.read_entries(positions[0], 10)) == 2
    assert followed.park()
    assert [bytes(e.data) for e in followed.read_entries(positions[0], 10)] == [b"p", b"q"]
    followed.close()
    followed.close()


def test_a_consumer_is_found_where_another_worker_kept_it(pair, open_storage):
    writer, storage = pair
    write(writer, [b"x"])
    writer.open_cursor("sub")
    writer.virtual_cursors("sub").put("vehicle-1", VirtualCursorState(Position(1, 2)))
    writer.flush_cursors()
    one = storage.follow_managed_ledger(TOPIC, "worker-1")
    one.virtual_cursors("sub").put("vehicle-1", VirtualCursorState(Position(1, 5)))
    one.virtual_cursors("sub").put("vehicle-3", VirtualCursorState(Position(1, 1)))
    one.flush_cursors()
    two = open_storage(check_directories=False).follow_managed_ledger(TOPIC, "worker-2")
    elsewhere = two.virtual_cursors_elsewhere("sub")
    assert elsewhere.find("vehicle-1") == VirtualCursorState(Position(1, 5))  # the most advanced
    assert elsewhere.find("vehicle-3") == VirtualCursorState(Position(1, 1))
    assert elsewhere.find("nobody") is None
    two.virtual_cursors("sub").put("vehicle-9", VirtualCursorState(Position(1, 1)))
    two.flush_cursors()
    one.virtual_cursors("sub").put("vehicle-4", VirtualCursorState(Position(1, 3)))
    one.flush_cursors()
    assert elsewhere.find("vehicle-4") == VirtualCursorState(Position(1, 3))  # as stored last
    assert elsewhere.find("vehicle-9") is None  # its own are not elsewhere
    owner_view = writer.virtual_cursors_elsewhere("sub")
    assert owner_view.find("vehicle-9") == VirtualCursorState(Position(1, 1))
