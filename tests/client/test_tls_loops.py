"""The broker's TLS port under both event loops it may run on (uvloop when installed, asyncio
without): a broker service in this process, our asyncio client over real sockets.

Connections are ``asyncio.BufferedProtocol``s; over TLS the loop's SSL layer reads into their
buffers, large frames (read into a buffer of their own) included. The peer certificate the
broker verified is on the connection, and names the role.
"""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from magnetar.broker.config import BrokerConfig
from magnetar.broker.tls_identity import role_from_certificate
from magnetar.cli.standalone import Standalone
from magnetar.client import aio
from tests.interop.tls_certs import CLIENT_ROLE, make_tls_files, tls_settings

LOOPS = {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.mark.parametrize("loop_name", list(LOOPS))
def test_tls_port_on_each_event_loop(tmp_path, loop_name):
    files = make_tls_files(tmp_path / "certs")
    config = BrokerConfig.load(
        None,
        data_dir=tmp_path / "data",
        port=0,
        http_port=0,
        **tls_settings(files, web_service_port_tls=None),
    )
    loop = LOOPS[loop_name]()
    try:
        loop.run_until_complete(asyncio.wait_for(_scenario(config, files), 60))
    finally:
        loop.close()


async def _scenario(config: BrokerConfig, files) -> None:
    standalone = Standalone(config)
    await standalone.start()
    service = standalone.broker
    try:
        assert standalone.admin.https_port is None and service.tls_port is not None
        url = f"pulsar+ssl://127.0.0.1:{service.tls_port}"
        trust = str(files.ca)
        auth = aio.AuthenticationTLS(str(files.client_cert), str(files.client_key))
        async with (
            aio.Client(url, tls_trust_certs_file_path=trust, authentication=auth) as with_cert,
            aio.Client(url, tls_trust_certs_file_path=trust) as without_cert,
            aio.Client(f"pulsar://127.0.0.1:{service.port}") as plain,
        ):
            topic = "persistent://public/default/tls-loops"
            consumer = await without_cert.subscribe(topic, "sub")
            producer = await with_cert.create_producer(topic, batching_enabled=False)
            payloads = [b"a", bytes(range(256)) * 12_288, b"b" * 70_000, b"c"]  # 3 MiB, then 68 KiB frames
            for data in payloads:
                await producer.send(data)
            received = [(await consumer.receive(10_000)).data() for _ in payloads]
            assert received == payloads
            await (await plain.create_producer(topic)).send(b"plain")
            assert (await consumer.receive(10_000)).data() == b"plain"

            by_port: dict[tuple[bool, str | None], int] = {}
            for cnx in service.connections:
                key = (cnx.auth.tls, role_from_certificate(cnx.auth.peer_certificate))
                by_port[key] = by_port.get(key, 0) + 1
            # The certificate the broker verified names the role; no certificate names none.
            assert by_port == {(True, CLIENT_ROLE): 1, (True, None): 1, (False, None): 1}
    finally:
        await standalone.stop()
