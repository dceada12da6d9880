"""A TCP proxy in front of the broker that advertises a smaller ``max_message_size``.

The official client sizes each chunk so that metadata + payload equal the advertised limit,
and our broker (so far) refuses such SENDs: their headers-and-payload are 10 bytes over (see
``test_official_chunked_20mb_to_our_consumer``). Advertising a limit a little below the
broker's lets the official client's chunks through, so our consumer's side of cross-client
chunking is tested anyway. The proxy also points lookups at itself, and ``cut()`` drops every
connection through it at once, as a network failure would (clients then reconnect through it).
While ``drop_receipts`` is set, SEND_RECEIPTs are dropped, as receipts lost with a connection
are: the sends were stored, and the producer sends them again after a ``cut()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from magnetar.protocol import FrameDecoder, encode_frame, wire

T = wire.BaseCommand


class ShrinkingProxy:
    def __init__(self, broker_port: int, shrink_by: int = 1024) -> None:
        self.broker_port = broker_port
        self.shrink_by = shrink_by
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shrinking-proxy", daemon=True)
        self._writers: set[asyncio.StreamWriter] = set()
        self.drop_receipts = False

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def __enter__(self) -> ShrinkingProxy:
        self._thread.start()
        assert self._started.wait(5)
        return self

    def __exit__(self, *exc_info) -> None:
        self.cut()  # clients closed later must not wait on connections nobody serves
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        self._thread.join(5)

    async def _shutdown(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop.stop()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        self._loop.run_forever()
        server.close()

    def cut(self) -> None:
        """Abort every connection through the proxy, both sides (new ones are still accepted)."""
        done = threading.Event()

        def abort_all() -> None:
            for writer in list(self._writers):
                writer.transport.abort()
            done.set()

        self._loop.call_soon_threadsafe(abort_all)
        assert done.wait(5)

    async def _handle(self, client_reader, client_writer) -> None:
        broker_reader, broker_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        pair = {client_writer, broker_writer}
        self._writers |= pair
        try:
            await asyncio.gather(
                self._pipe(client_reader, broker_writer, rewrite=False),
                self._pipe(broker_reader, client_writer, rewrite=True),
            )
        finally:
            self._writers -= pair

    async def _pipe(self, reader, writer, rewrite: bool) -> None:
        decoder = FrameDecoder(1 << 30)
        try:
            while data := await reader.read(1 << 20):
                if not rewrite:
                    writer.write(data)
                else:
                    decoder.feed(data)
                    while (frame := decoder.next_frame()) is not None:
                        if self.drop_receipts and frame.type == T.SEND_RECEIPT:
                            continue
                        writer.write(encode_frame(self._rewrite(frame.command), frame.payload))
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    def _rewrite(self, command: wire.BaseCommand) -> wire.BaseCommand:
        if command.type == T.CONNECTED and command.connected.max_message_size and self.shrink_by:
            command.connected.max_message_size -= self.shrink_by
        elif command.type == T.LOOKUP_RESPONSE:
            command.lookup_response.broker_service_url = self.service_url
        return command
