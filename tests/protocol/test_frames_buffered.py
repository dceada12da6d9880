"""FrameDecoder read straight from a socket's point of view: get_buffer / buffer_updated.

A read is simulated as the kernel does it: some bytes, at most the view's length, copied
into the view ``get_buffer`` returned. Between reads the shared buffer is scribbled over,
as another connection's read would, so any frame still pointing into it would show.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import FrameDecoder, ProtocolError, encode_frame, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import LARGE_FRAME, LARGE_FRAME_SHARE, SHARED_READ_SIZE, Frame

from .support import ALL_FRAMES, MAX_FRAME_SIZE, client_send_payload

SMALL = [ALL_FRAMES[name] for name in sorted(ALL_FRAMES)]


def send_frame(payload_size: int, sequence_id: int = 1) -> bytes:
    """A SEND frame whose headers-and-payload is a real captured one padded to ``payload_size``."""
    head = client_send_payload("SEND-plain")
    body = head + bytes((sequence_id + i) % 251 for i in range(payload_size - len(head)))
    return encode_frame(wrap(wire.CommandSend(producer_id=1, sequence_id=sequence_id)), body)


class Reader:
    """Feeds a byte stream to a decoder through get_buffer/buffer_updated, ``sizes`` bytes at a time."""

    def __init__(self, decoder: FrameDecoder, shared: bytearray | None) -> None:
        self.decoder = decoder
        self.shared = shared
        self.decoded: list[Frame] = []  # encoded again only at the end, after later reads
        self.views: list[memoryview] = []  # what each read was offered, for the zero-copy checks

    def read(self, data: memoryview, size: int) -> int:
        view = self.decoder.get_buffer(-1)
        assert len(view) > 0
        n = min(size, len(view), len(data))
        view[:n] = data[:n]
        self.views.append(view)
        self.decoder.buffer_updated(n)
        while (frame := self.decoder.next_frame()) is not None:
            self.decoded.append(frame)
        if self.shared is not None:
            self.shared[:] = b"\xaa" * len(self.shared)  # another connection's read
        return n

    @property
    def frames(self) -> list[bytes]:
        return [encode_frame(frame.command, frame.payload) for frame in self.decoded]

    def read_all(self, stream: bytes, sizes: list[int]) -> None:
        data = memoryview(stream)
        i = 0
        while data:
            n = self.read(data, sizes[i % len(sizes)] if sizes else len(data))
            data = data[n:]
            i += 1


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.permutations(range(len(SMALL) + 3)),
    sizes=st.lists(st.integers(min_value=1, max_value=300_000), max_size=12),
    shared=st.booleans(),
)
def test_reads_of_any_size_give_the_frames_that_were_sent(order, sizes, shared):
    large = [send_frame(LARGE_FRAME + 17, 1), send_frame(200_000, 2), send_frame(LARGE_FRAME - 100, 3)]
    frames = [(SMALL + large)[i] for i in order]
    buffer = bytearray(SHARED_READ_SIZE) if shared else None
    reader = Reader(FrameDecoder(MAX_FRAME_SIZE, buffer), buffer)
    reader.read_all(b"".join(frames), sizes)
    assert reader.frames == frames
    assert reader.decoder.buffered == 0


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    order=st.permutations(range(len(SMALL) + 3)),
    # Reads of at least 256 bytes: a held connection's frames pile up, and tiny reads make it slow.
    sizes=st.lists(st.integers(min_value=256, max_value=300_000), max_size=12),
    takes=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=8),
)
def test_frames_left_in_the_decoder_between_reads_come_out_intact_and_in_order(order, sizes, takes):
    """A connection under flow control stops taking frames midway and calls keep_pending."""
    large = [send_frame(LARGE_FRAME + 17, 1), send_frame(200_000, 2), send_frame(LARGE_FRAME - 100, 3)]
    frames = [(SMALL + large)[i] for i in order]
    shared = bytearray(SHARED_READ_SIZE)
    decoder = FrameDecoder(MAX_FRAME_SIZE, shared)
    decoded: list[Frame] = []
    junk = b"\xaa" * len(shared)
    data = memoryview(b"".join(frames))
    i = 0
    while data:
        view = decoder.get_buffer(-1)
        n = min(sizes[i % len(sizes)] if sizes else len(data), len(view), len(data))
        view[:n] = data[:n]
        del view
        decoder.buffer_updated(n)
        data = data[n:]
        for _ in range(takes[i % len(takes)]):
            if (frame := decoder.next_frame()) is None:
                break
            decoded.append(frame)
        decoder.keep_pending()
        shared[:] = junk  # another connection's read
        i += 1
    while (frame := decoder.next_frame()) is not None:
        decoded.append(frame)
    assert [encode_frame(frame.command, frame.payload) for frame in decoded] == frames
    assert decoder.buffered == 0


def test_a_large_frame_is_read_into_its_own_buffer_and_its_payload_is_that_buffer():
    shared = bytearray(SHARED_READ_SIZE)
    raw = send_frame(3 * SHARED_READ_SIZE)
    reader = Reader(FrameDecoder(MAX_FRAME_SIZE, shared), shared)
    data = memoryview(raw)
    data = data[reader.read(data, len(raw) // LARGE_FRAME_SHARE + 1) :]  # into the shared buffer
    assert reader.views[-1].obj is shared and not reader.decoded
    rest = reader.decoder.get_buffer(-1)
    assert len(rest) == len(data)  # the next read is offered exactly the rest of the frame
    del rest
    while data:
        data = data[reader.read(data, 65_536) :]
    assert reader.frames == [raw]
    payload = reader.decoded[-1].payload
    assert payload.obj is reader.views[-1].obj  # the bytes the socket wrote, not a copy
    assert all(view.obj is payload.obj for view in reader.views[1:])
    assert reader.decoder.held == 0


def test_a_size_field_alone_does_not_set_aside_the_frame():
    shared = bytearray(SHARED_READ_SIZE)
    decoder = FrameDecoder(MAX_FRAME_SIZE, shared)
    reader = Reader(decoder, shared)
    raw = send_frame(MAX_FRAME_SIZE - 1024)
    data = memoryview(raw)
    data = data[reader.read(data, 8) :]
    assert decoder.held < len(raw) // LARGE_FRAME_SHARE + 1024
    offered = len(decoder.get_buffer(-1))  # enough to reach the share, not the whole frame
    assert offered < len(raw) // LARGE_FRAME_SHARE
    while data:
        data = data[reader.read(data, 100_000) :]
    assert reader.frames == [raw]


def test_an_idle_decoder_holds_no_buffer_and_a_partial_frame_holds_only_itself():
    shared = bytearray(SHARED_READ_SIZE)
    decoder = FrameDecoder(MAX_FRAME_SIZE, shared)
    reader = Reader(decoder, shared)
    small = send_frame(5_000)
    reader.read_all(small * 3, [])
    assert len(reader.frames) == 3 and decoder.held == 0
    data = memoryview(small)
    data = data[reader.read(data, 2_000) :]
    assert decoder.buffered == 2_000
    assert 2_000 <= decoder.held <= len(small)  # the frame's own size, not a read buffer
    reader.read_all(bytes(data), [])
    assert reader.frames[-1] == small
    decoder.get_buffer(-1)  # the next read goes to the shared buffer again
    assert decoder.held == 0


def test_feed_after_a_large_frame_began_keeps_the_bytes_that_follow_it():
    decoder = FrameDecoder(MAX_FRAME_SIZE)
    raw, follower = send_frame(LARGE_FRAME * 2), ALL_FRAMES["broker-PING"]
    decoder.feed(raw[:100])
    assert decoder.next_frame() is None
    decoder.feed(raw[100:] + follower)
    frames = decoder.frames()
    assert [encode_frame(f.command, f.payload) for f in frames] == [raw, follower]


def test_a_large_frame_with_a_bad_command_size_is_refused_before_its_body_arrives():
    shared = bytearray(SHARED_READ_SIZE)
    decoder = FrameDecoder(MAX_FRAME_SIZE, shared)
    header = struct.pack(">II", LARGE_FRAME * 2, LARGE_FRAME * 2)  # command as large as the frame
    view = decoder.get_buffer(-1)
    view[: len(header)] = header
    del view
    decoder.buffer_updated(len(header))
    with pytest.raises(ProtocolError, match="does not fit"):
        decoder.next_frame()
    with pytest.raises(ProtocolError):
        decoder.buffer_updated(1)


def test_a_frame_over_the_limit_read_into_the_shared_buffer_is_refused_from_its_size():
    shared = bytearray(SHARED_READ_SIZE)
    decoder = FrameDecoder(1024, shared)
    view = decoder.get_buffer(-1)
    view[:4] = struct.pack(">I", 1025)
    del view
    decoder.buffer_updated(4)
    with pytest.raises(ProtocolError, match="exceeds the limit"):
        decoder.next_frame()
    assert decoder.held == 0  # nothing was allocated for it


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=4096), sizes=st.lists(st.integers(min_value=1, max_value=5000), max_size=8))
def test_arbitrary_bytes_read_through_the_shared_buffer_only_raise_protocol_error(data, sizes):
    shared = bytearray(SHARED_READ_SIZE)
    reader = Reader(FrameDecoder(64 * 1024, shared), shared)
    try:
        reader.read_all(data, sizes)
    except ProtocolError:
        return
    assert reader.decoder.buffered <= len(data)


class Admission:
    """A budget stand-in for the decoder's admission hook: admits while ``open``, records calls."""

    def __init__(self, open_: bool) -> None:
        self.open = open_
        self.asked: list[int] = []
        self.released: list[int] = []

    def admit_large_frame(self, size: int) -> bool:
        self.asked.append(size)
        return self.open

    def release_large_frame(self, size: int) -> None:
        self.released.append(size)


def test_a_large_frame_waits_unbuffered_until_admitted_and_gives_its_room_back_when_handed_out():
    shared = bytearray(SHARED_READ_SIZE)
    admission = Admission(open_=False)
    decoder = FrameDecoder(MAX_FRAME_SIZE, shared, admission)
    reader = Reader(decoder, shared)
    raw = send_frame(MAX_FRAME_SIZE - 1024)
    data = memoryview(raw)
    data = data[reader.read(data, 100_000) :]
    assert admission.asked == [len(raw) - 4] and not reader.decoded
    assert decoder.held < 2 * 100_000 + 1024  # what came, not the declared size
    assert decoder.next_frame() is None  # asked again, still no room
    admission.open = True
    assert decoder.next_frame() is None
    assert admission.asked == [len(raw) - 4] * 3 and not admission.released
    while data:
        data = data[reader.read(data, 256_000) :]
    assert reader.frames == [raw]
    assert admission.released == [len(raw) - 4]
    # A frame that arrives whole in one read holds no room and asks for none.
    reader.read_all(send_frame(LARGE_FRAME * 2), [])
    assert admission.asked == [len(raw) - 4] * 3


def test_an_incomplete_frame_holds_about_what_came_not_what_its_size_field_declares():
    shared = bytearray(SHARED_READ_SIZE)
    decoder = FrameDecoder(MAX_FRAME_SIZE, shared)
    reader = Reader(decoder, shared)
    raw = send_frame(MAX_FRAME_SIZE - 1024)
    data = memoryview(raw)
    sent = reader.read(data, 8)
    assert decoder.held <= 1024 + 8
    while sent < len(raw) // LARGE_FRAME_SHARE - 50_000:
        sent += reader.read(data[sent:], 20_000)
        assert decoder.held <= 2 * sent + 1024
    reader.read_all(bytes(data[sent:]), [300_000])
    assert reader.frames == [raw]
