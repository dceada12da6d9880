"""A chunk a producer sends again (after a reconnect, a restart, kill -9) is stored once: its send is
answered with the stored chunk's position. Real storage, no network."""

from __future__ import annotations

import asyncio

from magnetar.broker.producer import DUPLICATE
from magnetar.broker.stored_chunks import StoredChunks
from magnetar.protocol.chunks import chunk_ref
from magnetar.protocol.headers import parse_metadata

from .entry_harness import chunk, message

N = 6


def parts(uuid: str = "prod-0", seq: int = 0) -> list[bytes]:
    return [chunk(b"part-%d" % i, uuid, i, N, seq=seq) for i in range(N)]


def send_all(h, datas: list[bytes], sequence_id: int | None = None) -> list:
    futures = [h.publish_nowait(d, sequence_id=sequence_id) for d in datas]
    return h.run(asyncio.gather(*futures))


def stored_chunk_ids(h) -> list[tuple[str, int]]:
    out = []
    for _, _, producer_bytes in h.stored():
        ref = chunk_ref(parse_metadata(producer_bytes)[0])
        out.append((ref.uuid, ref.chunk_id) if ref is not None else ("whole", -1))
    return out


def test_chunks_sent_again_are_answered_with_the_stored_ones(harnesses):
    h = harnesses()
    chunks = parts()
    first = send_all(h, chunks[:4])
    again = send_all(h, chunks[2:])
    assert again[:2] == first[2:], "chunks 2 and 3 were stored already"
    assert stored_chunk_ids(h) == [("prod-0", i) for i in range(N)]


def test_a_copy_sent_while_the_first_is_being_stored_waits_for_it(harnesses):
    h = harnesses(fsync_policy="always")
    chunks = parts()
    both = h.run(asyncio.gather(h.publish_nowait(chunks[0]), h.publish_nowait(chunks[0])))
    assert both[0] == both[1]
    assert stored_chunk_ids(h) == [("prod-0", 0)]


def test_chunks_stored_before_a_kill_9_are_recognised_after_it(harnesses):
    h = harnesses()
    chunks = parts()
    first = send_all(h, chunks[:3])  # no flush: recovery finds them by replaying the ledger
    h.crash()
    h = harnesses()
    again = send_all(h, chunks[1:])
    assert again[:2] == first[1:]
    assert stored_chunk_ids(h) == [("prod-0", i) for i in range(N)]


def test_chunks_in_the_snapshot_and_after_it_are_recognised_after_a_kill_9(harnesses):
    h = harnesses()
    chunks = parts()
    first = send_all(h, chunks[:2])
    h.topic().flush()  # the snapshot covers chunks 0 and 1 ...
    first += send_all(h, chunks[2:4])  # ... replay finds 2 and 3
    h.crash()
    h = harnesses()
    again = send_all(h, chunks)
    assert again[:4] == first
    assert stored_chunk_ids(h) == [("prod-0", i) for i in range(N)]


def test_a_new_message_under_an_old_uuid_is_stored(harnesses):
    """A producer restarted under its name (no deduplication) reuses uuids: its new message differs."""
    h = harnesses()
    old = send_all(h, parts())
    h.close()
    h = harnesses()
    new = [chunk(b"other-%d" % i, "prod-0", i, N, publish_time=1_800_000_000_000) for i in range(N)]
    assert not set(send_all(h, new)) & set(old)
    assert stored_chunk_ids(h) == [("prod-0", i) for i in range(N)] * 2


def test_with_deduplication_a_resent_chunk_of_a_message_already_stored_is_not_stored_again(harnesses):
    """Forgotten chunks (past the bound) of a message whose last chunk is stored are duplicates."""
    h = harnesses(deduplication_enabled=True)
    send_all(h, parts(seq=0), sequence_id=0)
    send_all(h, [message(b"next", seq=1)], sequence_id=1)
    h.topic().deduplication.stored_chunks = StoredChunks()  # forget every chunk
    assert send_all(h, parts(seq=0)[:3], sequence_id=0) == [DUPLICATE] * 3
    assert len(stored_chunk_ids(h)) == N + 1
