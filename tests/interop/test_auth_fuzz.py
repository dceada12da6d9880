"""Fuzzing the CONNECT / AUTH_RESPONSE path of a broker with token authentication on: every
malformed credential gets an error and a closed connection, while the broker stays up and an
authenticated client on it keeps working. One broker for all examples (tens of them)."""

from __future__ import annotations

import base64
import time

import jwt
import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.security import tokens
from tests.interop.conftest import CLIENT_LOGGER, BrokerProcess
from tests.interop.support import RawConnection

T = wire.BaseCommand
KEY = tokens.create_secret_key()
FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def auth_broker(tmp_path_factory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("auth-fuzz"),
        {
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(KEY).decode(),
        },
    )
    broker.start()
    yield broker
    broker.close()


@pytest.fixture(scope="module")
def canary(auth_broker):
    """An authenticated producer and consumer that must keep working through the fuzzing."""
    client = pulsar.Client(
        auth_broker.service_url,
        authentication=pulsar.AuthenticationToken(tokens.create_token(KEY, "canary")),
        operation_timeout_seconds=10,
        logger=CLIENT_LOGGER,
    )
    topic = f"persistent://public/default/auth-fuzz-canary-{time.time_ns()}"
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    counter = iter(range(1_000_000))

    def check() -> None:
        payload = b"%d" % next(counter)
        producer.send(payload)
        assert consumer.receive(5000).data() == payload

    yield check
    client.close()


def assert_refused(raw: RawConnection) -> None:
    frames = raw.expect_closed(timeout=10)
    assert frames, "closed without an error"
    assert frames[-1].type == T.ERROR, frames
    assert frames[-1].body().error in (wire.AuthenticationError, wire.UnknownError), frames


# Tokens that look like tokens: JWT-shaped text with random parts, signed wrongly, or junk claims.
jwt_like = st.one_of(
    st.tuples(st.text(max_size=40), st.text(max_size=40), st.text(max_size=40)).map(lambda p: ".".join(p)),
    st.dictionaries(st.text(max_size=8), st.one_of(st.integers(), st.text(max_size=8)), max_size=4).map(
        lambda claims: (
            jwt.encode(claims, KEY, algorithm="HS256")  # no string "sub": refused
            if not isinstance(claims.get("sub"), str) or not claims.get("sub")
            else jwt.encode({**claims, "exp": 1}, KEY, algorithm="HS256")
        )  # expired
    ),
    st.text(min_size=1, max_size=20).map(lambda role: tokens.create_token(tokens.create_secret_key(), role)),
)
auth_data = st.one_of(st.binary(max_size=600), jwt_like.map(str.encode))
method_names = st.one_of(st.just("token"), st.text(max_size=30), st.just(None))


@FUZZ
@given(method=method_names, data=st.one_of(auth_data, st.none()))
def test_fuzzed_connect_credentials_refused(auth_broker, canary, method, data):
    raw = RawConnection(auth_broker.port)
    try:
        connect = wire.CommandConnect(client_version="fuzz", protocol_version=20)
        if method is not None:
            connect.auth_method_name = method
        if data is not None:
            connect.auth_data = data
        raw.send_command(connect)
        assert_refused(raw)
    finally:
        raw.close()
    canary()


@FUZZ
@given(method=method_names, data=auth_data, raw_body=st.booleans())
def test_fuzzed_auth_response_refused(auth_broker, canary, method, data, raw_body):
    raw = RawConnection(auth_broker.port)
    try:
        connect = wire.CommandConnect(client_version="fuzz", protocol_version=20, auth_method_name="token")
        connect.auth_data = tokens.create_token(KEY, "fuzzer", 600).encode()
        connect.feature_flags.supports_auth_refresh = True
        raw.send_command(connect)
        raw.expect(T.CONNECTED)
        if raw_body:  # AUTH_RESPONSE whose body (BaseCommand field 37) is arbitrary bytes
            command = T(type=T.AUTH_RESPONSE).SerializeToString() + b"\xaa\x02" + _varint(len(data)) + data
            raw.send((len(command) + 4).to_bytes(4, "big") + len(command).to_bytes(4, "big") + command)
        else:
            response = wire.CommandAuthResponse(client_version="fuzz")
            if method is not None:
                response.response.auth_method_name = method
            response.response.auth_data = data
            raw.send_command(response)
        assert_refused(raw)
    finally:
        raw.close()
    canary()


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
