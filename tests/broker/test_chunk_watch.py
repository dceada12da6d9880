"""``ChunkWatch`` against a model of pulsar-client-cpp 4.2.0's chunk handling: whatever part of a
chunked message the client kept from an earlier connection, the message as the watch sends it
again is assembled (and, where the lead can be sent, once); a second pass keeps the order and
goes in slices."""

from __future__ import annotations

import pytest

from magnetar.broker.chunk_watch import SLICE_ENTRIES, ChunkWatch, keeps_partial_chunks
from magnetar.broker.entries import DispatchEntry
from magnetar.protocol import wire
from magnetar.protocol.chunks import ChunkRef, chunk_ref
from magnetar.storage.position import Position


class CppClient:
    """pulsar-client-cpp 4.2.0's ``ConsumerImpl::processMessageChunk``: partial messages by uuid,
    kept across reconnects; a chunk is appended only if its id is the count held, any other id
    removes the context, a chunk without one is dropped."""

    def __init__(self) -> None:
        self.contexts: dict[str, list[Position]] = {}
        self.delivered: list[list[Position]] = []

    def receive(self, items: list[DispatchEntry]) -> None:
        for item in items:
            chunk = chunk_ref(item.metadata)
            if chunk is None:
                self.delivered.append([item.position])
                continue
            context = self.contexts.get(chunk.uuid)
            if chunk.chunk_id == 0 and context is None:
                context = self.contexts[chunk.uuid] = []
            if context is None:
                continue  # "Received an uncached chunk"
            if chunk.chunk_id != len(context):
                del self.contexts[chunk.uuid]  # "chunk id is invalid"
                continue
            context.append(item.position)
            if len(context) == chunk.num_chunks:
                del self.contexts[chunk.uuid]
                self.delivered.append(context)


def entry(entry_id: int, uuid: str | None = None, chunk_id: int = 0, num_chunks: int = 1) -> DispatchEntry:
    meta = wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=1)
    if uuid is not None:
        meta.uuid, meta.chunk_id, meta.num_chunks_from_msg = uuid, chunk_id, num_chunks
    return DispatchEntry(Position(1, entry_id), b"x" * 10, 0, 1, meta)


def message(uuid: str, n: int, first: int = 0) -> list[DispatchEntry]:
    return [entry(first + i, uuid, i, n) for i in range(n)]


def watch_of(stored: list[DispatchEntry], held_before=(), lead: bool = True) -> ChunkWatch:
    by_position = {item.position: item for item in stored}

    def last_chunk(metadata: wire.MessageMetadata, chunk: ChunkRef) -> Position | None:
        found = [
            i.position for i in stored if (c := chunk_ref(i.metadata)) and c.uuid == chunk.uuid and c.last
        ]
        return found[0] if lead and found else None

    return ChunkWatch(by_position.get, last_chunk, lambda watch, keep: None, held_before)


def send(watch: ChunkWatch, client: CppClient, *batches: list[DispatchEntry], limit: int = 1000) -> list:
    """Each batch through the watch to the client, then whatever it queued; what was sent."""
    sent = []
    for batch in [*batches]:
        out = watch.through(batch, limit)
        client.receive(out)
        sent += out
    while watch.queued:
        out = watch.through([], limit)
        client.receive(out)
        sent += out
    return sent


def test_the_model_drops_a_message_sent_again_to_a_client_that_kept_part_of_it():
    """What the watch is for: the bug, as the model has it."""
    msg = message("u", 5)
    client = CppClient()
    client.contexts["u"] = [m.position for m in msg[:3]]
    client.receive(msg)
    assert client.delivered == []


@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("lead", [True, False], ids=["lead", "second-pass"])
def test_whatever_the_client_kept_the_message_is_assembled(n: int, lead: bool):
    msg = message("u", n)
    whole = [m.position for m in msg]
    for kept in [None, *range(n - 1)]:  # nothing, or chunks 0..kept from before the reconnect
        client = CppClient()
        if kept is not None:
            client.contexts["u"] = whole[: kept + 1]
        watch = watch_of(msg, ["u"], lead)
        if lead:
            send(watch, client, msg)
        else:  # the last chunk is stored only after the first ones went out
            send(watch, client, msg[:-1], msg[-1:])
        assert client.delivered, f"kept {kept}: dropped"
        assert all(d == whole for d in client.delivered)
        twice = kept == n - 2 if lead else kept is None
        assert len(client.delivered) == (2 if twice else 1), f"kept {kept}"
        assert client.contexts == {}


def test_the_lead_is_the_last_chunk_before_the_first():
    msg = message("u", 4)
    sent = send(watch_of(msg, ["u"]), CppClient(), msg)
    assert [s.position.entry_id for s in sent] == [3, 0, 1, 2, 3]


def test_a_client_holding_part_of_a_message_sent_again_on_the_same_connection_assembles_it():
    """A redelivery (a consumer's nack or ack timeout naming a chunk) sends the message again from
    its first chunk while the client still holds part of it."""
    msg, other = message("u", 4), message("v", 2, first=10)
    client = CppClient()
    watch = watch_of(msg + other)
    send(watch, client, msg[:2], other)
    assert watch.holding() == ["u"]
    send(watch, client, msg)
    assert client.delivered == [[m.position for m in other], [m.position for m in msg]]
    assert watch.holding() == []


def test_a_second_pass_goes_before_what_followed_the_message_in_slices():
    msg = message("u", 3)
    after = [entry(10 + i) for i in range(3)]
    watch = watch_of(msg + after, ["u"], lead=False)
    assert [s.position.entry_id for s in watch.through(msg + after[:2], 1000)] == [0, 1, 2]
    assert watch.queued
    slices = [watch.through(after[2:], 2)]
    while watch.queued:
        slices.append(watch.through([], 2))
    assert [[s.position.entry_id for s in part] for part in slices] == [[0, 1], [2, 10], [11, 12]]


def test_a_slice_is_bounded():
    msg = message("u", SLICE_ENTRIES + 50)
    watch = watch_of(msg, ["u"], lead=False)
    watch.through(msg, 10_000)
    assert len(watch.through([], 10_000)) == SLICE_ENTRIES


def test_holding_follows_what_the_client_keeps():
    u, v, w = message("u", 4), message("v", 2, first=10), message("w", 3, first=20)
    watch = watch_of(u + v + w)
    watch.through(u[:2] + v + w[:1], 1000)
    assert watch.holding() == ["u", "w"]
    watch.through(w[2:], 1000)  # not the id the client expects: it drops the message
    assert watch.holding() == ["u"]


@pytest.mark.parametrize(
    ("client_version", "keeps"),
    [
        ("Pulsar-CPP-v4.2.0", True),
        ("Pulsar-CPP-v3.7.0-python-app", True),
        ("Pulsar-CPP-v2.10.2", True),
        ("Pulsar-CPP-v4.2.1", False),
        ("Pulsar-CPP-v4.3.0", False),
        ("Pulsar-Java-v3.3.0", False),
        ("Magnetar-Python 0.1.0", False),
        ("", False),
    ],
)
def test_which_clients_keep_partial_messages(client_version: str, keeps: bool):
    assert keeps_partial_chunks(client_version) is keeps
