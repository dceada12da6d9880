"""A topic's ``pulsar.repl.{remote}`` cursors, on a real managed ledger without a network: not
subscriptions, durable across a reopen, holding back trimming until they move, and gone with
``drop_replication_cursor``."""

from __future__ import annotations

from magnetar.broker.replication import cursor_name


def test_a_replication_cursor_is_not_a_subscription(harnesses):
    topic = harnesses().topic()
    assert topic.open_replication_cursors(["centre", "other"]) == ["centre", "other"]
    assert topic.open_replication_cursors(["centre"]) == [], "opened once"
    assert set(topic.ml.cursors()) == {"pulsar.repl.centre", "pulsar.repl.other"}
    assert set(topic.replication_cursors) == {"centre", "other"}
    assert topic.subscriptions == {}


def test_the_cursor_survives_a_reopen_where_it_was(harnesses):
    h = harnesses()
    topic = h.topic()
    topic.open_replication_cursors(["centre"])
    positions = h.publish_all([b"a", b"b", b"c"])
    topic.replication_cursors["centre"].mark_delete(positions[1])
    h.close()

    topic = harnesses().topic()
    assert set(topic.replication_cursors) == {"centre"}
    assert topic.subscriptions == {}
    cursor = topic.replication_cursors["centre"]
    assert cursor.mark_delete_position == positions[1]
    assert [entry.position for entry in cursor.read_entries(10)] == [positions[2]]
    assert topic.open_replication_cursors(["centre"]) == [], "the reopened cursor is the one used"


def test_the_cursor_holds_back_trimming_until_it_moves(harnesses):
    h = harnesses(max_ledger_size_bytes=1)  # one entry per ledger
    topic = h.topic()
    topic.open_replication_cursors(["centre"])
    positions = h.publish_all([b"a", b"b", b"c", b"d"])
    ledgers = [p.ledger_id for p in positions]
    assert topic.trim(0, 0) == [], "nothing replicated yet"

    topic.replication_cursors["centre"].mark_delete(positions[1])
    assert topic.trim(0, 0) == ledgers[:2]
    assert h.stored()[0][0] == positions[2]

    topic.drop_replication_cursor("centre")
    assert topic.replication_cursors == {} and cursor_name("centre") not in topic.ml.cursors()
    topic.drop_replication_cursor("centre")  # dropping what is gone is fine
    trimmed = topic.trim(0, 0)
    assert ledgers[2] in trimmed, "what it held back goes once it is dropped"


def test_a_dropped_cursor_stays_gone_after_a_reopen(harnesses):
    h = harnesses()
    topic = h.topic()
    topic.open_replication_cursors(["centre", "other"])
    topic.drop_replication_cursor("centre")
    h.close()
    topic = harnesses().topic()
    assert set(topic.replication_cursors) == {"other"}
    assert set(topic.ml.cursors()) == {"pulsar.repl.other"}
