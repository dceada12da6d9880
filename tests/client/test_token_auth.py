"""Our client with token authentication against our broker: ``AuthenticationToken`` with a token
or a supplier (CONNECT and AUTH_CHALLENGE answers), a refused token, the asyncio API."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from magnetar.client import AuthenticationError, AuthenticationToken, aio, errors
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.security import tokens


def start_broker(broker_factory, key: bytes, **extra):
    url = "data:;base64," + base64.b64encode(key).decode()
    return broker_factory({"authentication_enabled": True, "token_secret_key": url, **extra})


def test_static_token_round_trip(broker_factory, magnetar_factory, topic):
    key = tokens.create_secret_key()
    broker = start_broker(broker_factory, key)
    client = magnetar_factory(
        broker.service_url, authentication=AuthenticationToken(tokens.create_token(key, "ours"))
    )
    consumer = client.subscribe(topic, "s")
    client.create_producer(topic).send(b"hello")
    assert consumer.receive(5000).data() == b"hello"
    assert "authenticated as 'ours' with token" in broker.log_text()


def test_refused_token_is_authentication_error(broker_factory, magnetar_factory, topic):
    key = tokens.create_secret_key()
    broker = start_broker(broker_factory, key)
    bad = AuthenticationToken(tokens.create_token(tokens.create_secret_key(), "mallory"))
    # A timeout would take the whole minute: the refusal must come first, as AuthenticationError.
    client = magnetar_factory(broker.service_url, authentication=bad, operation_timeout_seconds=60)
    with pytest.raises(AuthenticationError) as caught:
        client.create_producer(topic)
    assert "signature" in str(caught.value)
    with pytest.raises(AuthenticationError):
        client.subscribe(topic, "s")
    # No credentials at all, or garbage: refused likewise.
    anonymous = magnetar_factory(broker.service_url, operation_timeout_seconds=60)
    with pytest.raises(AuthenticationError):
        anonymous.create_producer(topic)
    garbage = magnetar_factory(
        broker.service_url, authentication=AuthenticationToken("garbage"), operation_timeout_seconds=60
    )
    with pytest.raises(errors.AuthenticationError):
        garbage.create_producer(topic)


def test_token_read_from_a_file_with_its_newline_works(broker_factory, magnetar_factory, topic, tmp_path):
    key = tokens.create_secret_key()
    broker = start_broker(broker_factory, key)
    token_file = tmp_path / "ours.token"
    token_file.write_text(tokens.create_token(key, "ours") + "\n")
    for token in (token_file.read_text(), lambda: token_file.read_text()):
        client = magnetar_factory(broker.service_url, authentication=AuthenticationToken(token))
        client.create_producer(topic).send(b"hello")


@pytest.mark.slow
def test_supplier_answers_challenges_asyncio(broker_factory, topic):
    key = tokens.create_secret_key()
    broker = start_broker(broker_factory, key, authentication_refresh_check_seconds=1)
    issued: list[float] = []

    def supplier() -> str:
        issued.append(time.time())
        return tokens.create_token(key, "refresher", 2)

    async def main() -> None:
        client = aio.Client(
            broker.service_url, operation_timeout_seconds=10, authentication=AuthenticationToken(supplier)
        )
        async with client:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(topic)
            sent = 0
            deadline = time.monotonic() + 30
            while len(issued) < 3:  # sending on until the token was refreshed twice
                assert time.monotonic() < deadline, f"{len(issued)} tokens issued"
                await producer.send(b"%d" % sent)
                sent += 1
                await asyncio.sleep(0.05)  # pacing the sends, not waiting for an event
            for i in range(sent):
                msg = await consumer.receive(5000)
                assert msg.data() == b"%d" % i
                await consumer.acknowledge(msg)

    asyncio.run(main())
    assert len(issued) >= 3
    assert "authentication refused" not in broker.log_text()


def test_token_type_checked():
    with pytest.raises(TypeError):
        AuthenticationToken(42)  # type: ignore[arg-type]
    assert AuthenticationToken(lambda: " t \n").auth_data() == b"t"
    assert AuthenticationToken(lambda: b" t \n").auth_data() == b"t"  # type: ignore[arg-type, return-value]
    assert AuthenticationToken("x").auth_method_name == "token"
    assert wire.AuthenticationError == 3
