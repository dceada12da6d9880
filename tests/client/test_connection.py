"""The connection against a scripted in-process server: handshake, requests, pings, closing."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client.connection import DEFAULT_MAX_MESSAGE_SIZE, Connection
from magnetar.client.errors import ConnectError, ConnectionClosed, Timeout, TopicNotFound
from magnetar.protocol import FrameDecoder, commands, encode_frame, wire
from tests.waiting import eventually_async

T = wire.BaseCommand


class ScriptedServer:
    """Answers CONNECT, then hands every later frame to ``on_frame(frame, writer)``."""

    def __init__(self, on_frame=None, connected: wire.CommandConnected | None = None, first=None):
        self.on_frame = on_frame or (lambda frame, writer: None)
        self.connected = connected or wire.CommandConnected(server_version="scripted", protocol_version=20)
        self.first = first
        self.received: list = []
        self.writers: list = []

    async def __aenter__(self):
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info):
        for writer in self.writers:
            writer.close()
        self.server.close()

    async def _handle(self, reader, writer):
        self.writers.append(writer)
        decoder = FrameDecoder(1 << 24)
        while data := await reader.read(65536):
            decoder.feed(data)
            for frame in decoder.frames():
                self.received.append(frame)
                if frame.type == T.CONNECT:
                    writer.write(encode_frame(self.first or commands.wrap(self.connected)))
                else:
                    self.on_frame(frame, writer)
        writer.close()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_handshake_announces_broker_entry_metadata_and_reads_the_limit():
    async def main():
        connected = wire.CommandConnected(server_version="s", protocol_version=19, max_message_size=1234)
        async with ScriptedServer(connected=connected) as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            connect = server.received[0].command.connect
            assert connect.feature_flags.supports_broker_entry_metadata
            assert connect.protocol_version >= 19
            assert (cnx.max_message_size, cnx.server_protocol_version) == (1234, 19)
            await cnx.close()

    run(main())


def test_without_max_message_size_the_official_default_applies():
    async def main():
        async with ScriptedServer() as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            assert cnx.max_message_size == DEFAULT_MAX_MESSAGE_SIZE == 5 * 1024 * 1024 - 10 * 1024
            await cnx.close()

    run(main())


def test_a_first_frame_other_than_connected_fails_the_handshake():
    async def main():
        async with ScriptedServer(first=commands.ping()) as server:
            with pytest.raises(ConnectError, match="PING"):
                await Connection.open("127.0.0.1", server.port)
        async with ScriptedServer(first=commands.error(0, wire.AuthenticationError, "who?")) as server:
            with pytest.raises(Exception, match="who"):
                await Connection.open("127.0.0.1", server.port)

    run(main())


def test_nobody_listening_is_a_connect_error():
    async def main():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        with pytest.raises(ConnectError):
            await Connection.open("127.0.0.1", port, connection_timeout=1)

    run(main())


def test_requests_are_matched_by_request_id_even_out_of_order():
    held = []

    def on_frame(frame, writer):
        if frame.type == T.LOOKUP:
            held.append(frame.command.lookup.request_id)
            if len(held) == 2:  # answer the second first
                for request_id in reversed(held):
                    answer = wire.CommandLookupTopicResponse(
                        request_id=request_id,
                        response=wire.CommandLookupTopicResponse.Connect,
                        broker_service_url=f"pulsar://b{request_id}:1",
                    )
                    writer.write(encode_frame(commands.wrap(answer)))

    async def main():
        async with ScriptedServer(on_frame) as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            a, b = await asyncio.gather(
                cnx.request(wire.CommandLookupTopic(topic="a", request_id=0)),
                cnx.request(wire.CommandLookupTopic(topic="b", request_id=0)),
            )
            assert a.broker_service_url != b.broker_service_url
            assert {a.request_id, b.request_id} == set(held)
            await cnx.close()

    run(main())


def test_error_answers_raise_the_matching_server_error():
    def on_frame(frame, writer):
        request_id = frame.body().request_id
        writer.write(encode_frame(commands.error(request_id, wire.TopicNotFound, "no such topic")))

    async def main():
        async with ScriptedServer(on_frame) as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            with pytest.raises(TopicNotFound, match="no such topic"):
                await cnx.request(wire.CommandPartitionedTopicMetadata(topic="t", request_id=0))
            assert not cnx.is_closed
            await cnx.close()

    run(main())


def test_every_pending_request_fails_when_the_connection_closes():
    def on_frame(frame, writer):
        if frame.type == T.LOOKUP and frame.command.lookup.topic == "last":
            writer.close()

    async def main():
        async with ScriptedServer(on_frame) as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            requests = [
                asyncio.ensure_future(cnx.request(wire.CommandLookupTopic(topic=t, request_id=0)))
                for t in ("a", "b", "last")
            ]
            results = await asyncio.gather(*requests, return_exceptions=True)
            assert all(isinstance(r, ConnectionClosed) for r in results), results
            assert cnx.is_closed
            with pytest.raises(ConnectionClosed):
                await cnx.request(wire.CommandLookupTopic(topic="x", request_id=0))

    run(main())


def test_handlers_hear_about_the_close():
    class Handler:
        closed = 0

        def on_connection_closed(self, cnx):
            self.closed += 1

    async def main():
        async with ScriptedServer() as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            producer, consumer = Handler(), Handler()
            cnx.register_producer(1, producer)
            cnx.register_consumer(1, consumer)
            server.writers[0].close()
            await asyncio.wait_for(cnx.wait_closed(), 5)
            assert producer.closed == consumer.closed == 1

    run(main())


def test_request_timeout():
    async def main():
        async with ScriptedServer() as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            with pytest.raises(Timeout):
                await cnx.request(wire.CommandLookupTopic(topic="t", request_id=0), timeout=0.1)
            await cnx.close()

    run(main())


def test_ping_gets_pong_and_keepalive_pings():
    async def main():
        async with ScriptedServer() as server:
            cnx = await Connection.open("127.0.0.1", server.port, keepalive_interval=0.05)
            server.writers[0].write(encode_frame(commands.ping()))

            def answered_and_pinged() -> bool:
                kinds = {f.type for f in server.received}
                return T.PONG in kinds and T.PING in kinds

            await eventually_async(answered_and_pinged, what="a PONG for the PING, and a keepalive PING")
            await cnx.close()

    run(main())


def test_a_silent_server_gets_the_connection_closed():
    async def main():
        async with ScriptedServer() as server:
            cnx = await Connection.open("127.0.0.1", server.port, keepalive_interval=0.05)
            await asyncio.wait_for(cnx.wait_closed(), 2)
            assert "answering" in str(cnx.close_reason)
            assert server.received

    run(main())


def test_garbage_from_the_server_closes_the_connection():
    def on_frame(frame, writer):
        writer.write(b"\x00\x00\x00\x02\x00\x00")  # a frame too small for its command

    async def main():
        async with ScriptedServer(on_frame) as server:
            cnx = await Connection.open("127.0.0.1", server.port)
            with pytest.raises(ConnectionClosed):
                await cnx.request(wire.CommandLookupTopic(topic="t", request_id=0))
            assert cnx.is_closed

    run(main())
