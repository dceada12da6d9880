"""Phase one of the compactor, pure: the compacted view is the last message of each key up to the
horizon, tombstones removing, keyless messages left out, chunked messages whole or not at all."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from magnetar.broker.compaction_selection import WHOLE, select
from magnetar.protocol.chunks import ChunkRef
from magnetar.protocol.compaction import EntryFacts, KeyedMessage
from magnetar.storage.position import Position

message = st.builds(KeyedMessage, st.sampled_from(["a", "b", "c", None]), st.booleans())
#: An entry: a single message, or a batch of 1-4.
entry = st.one_of(
    message.map(lambda m: EntryFacts((m,), False, None, "p")),
    st.lists(message, min_size=1, max_size=4).map(lambda ms: EntryFacts(tuple(ms), True, None, "p")),
)


def _positions(n: int) -> list[Position]:
    return [Position(3 + i // 5, i % 5) for i in range(n)]  # five entries to a ledger


def _kept_messages(selection, entries):
    out = set()
    for position, facts in entries:
        chosen = selection.kept.get(position)
        if chosen is None:
            continue
        indexes, _ = chosen
        for index in range(len(facts.messages)) if indexes is WHOLE else indexes:
            out.add((position, index if facts.batch else -1))
    return out


@given(st.lists(entry, max_size=30), st.integers(min_value=0, max_value=30))
def test_the_view_is_the_last_message_of_each_key_up_to_the_horizon(facts, cut):
    entries = list(zip(_positions(len(facts)), facts, strict=True))
    end = entries[cut][0] if cut < len(entries) else None
    model: dict[str, tuple[Position, int]] = {}
    for position, one in entries[:cut]:
        for index, m in enumerate(one.messages):
            if m.key is None:
                continue
            if m.empty:
                model.pop(m.key, None)
            else:
                model[m.key] = (position, index if one.batch else -1)
    selection = select(entries, end)
    assert _kept_messages(selection, entries) == set(model.values())
    assert selection.kept_messages == len(model)
    assert selection.horizon == (entries[min(cut, len(entries)) - 1][0] if entries[:cut] else None)
    assert selection.stop_before is None


def _chunk(key, uuid, chunk_id, num, producer="p"):
    return EntryFacts((KeyedMessage(key, False),), False, ChunkRef(uuid, chunk_id, num), producer)


def _one(key, producer="p", empty=False):
    return EntryFacts((KeyedMessage(key, empty),), False, None, producer)


def test_a_chunked_message_is_kept_whole_with_the_key_of_its_last_chunk():
    facts = [_chunk(None, "u", 0, 3), _one("k", "q"), _chunk(None, "u", 1, 3), _chunk("k", "u", 2, 3)]
    entries = list(zip(_positions(4), facts, strict=True))
    selection = select(entries)
    assert set(selection.kept) == {entries[0][0], entries[2][0], entries[3][0]}  # "k" from q is older


def test_a_chunked_message_incomplete_at_the_horizon_stops_it_before_its_first_chunk():
    facts = [_one("a"), _chunk("k", "u", 0, 2, "q"), _one("b")]
    entries = list(zip(_positions(3), facts, strict=True))
    selection = select(entries)
    assert selection.stop_before == entries[1][0]
    again = select(entries, selection.stop_before)
    assert again.stop_before is None and again.horizon == entries[0][0] and set(again.kept) == {entries[0][0]}


def test_a_chunked_message_its_producer_gave_up_on_is_dropped_and_holds_nothing_back():
    facts = [_chunk("k", "u", 0, 3), _one("a"), _chunk("k", "v", 0, 1)]
    entries = list(zip(_positions(3), facts, strict=True))
    selection = select(entries)
    assert selection.stop_before is None
    assert set(selection.kept) == {entries[1][0], entries[2][0]}


def test_chunks_whose_first_chunk_is_missing_are_never_half_kept():
    facts = [_chunk("k", "u", 1, 2), _one("a")]
    entries = list(zip(_positions(2), facts, strict=True))
    assert set(select(entries).kept) == {entries[1][0]}
