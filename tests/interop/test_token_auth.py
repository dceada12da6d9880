"""Token authentication (Pulsar's AuthenticationProviderToken) against a real broker, with the
official client: HS256 / RS256 / ES256 tokens accepted, bad ones refused with AuthenticationError
and the connection closed (others unaffected), AUTH_CHALLENGE refresh from a token supplier, an
expired static token closed, the admin API's 401/200, and the ``magnetar tokens`` commands."""

from __future__ import annotations

import base64
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pulsar
import pytest

from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.frames import encode_frame
from magnetar.security import tokens
from tests.interop.conftest import CLIENT_LOGGER
from tests.interop.support import RawConnection, receive_n

T = wire.BaseCommand
#: A token meant to expire during a test. ``exp`` is whole seconds, so it lives 2 to 3 s: long enough
#: to reach CONNECT on a loaded machine (a 1 s token could expire before it), short for the test.
LIFETIME_S = 3


def data_url(key: bytes) -> str:
    return "data:;base64," + base64.b64encode(key).decode()


def secret_broker(broker_factory, key: bytes, **extra):
    return broker_factory({"authentication_enabled": True, "token_secret_key": data_url(key), **extra})


def auth_client(broker, token, **options) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(token),
        operation_timeout_seconds=options.pop("operation_timeout_seconds", 10),
        logger=CLIENT_LOGGER,
        **options,
    )


def round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s")
    producer = client.create_producer(topic)
    producer.send(b"hello")
    assert [m.data() for m in receive_n(consumer, 1, ack=True)] == [b"hello"]


def raw_connect(broker, method: str | None, data: bytes | None) -> list:
    """Frames the broker sends a CONNECT with these credentials before closing (fails if it stays open)."""
    raw = RawConnection(broker.port)
    try:
        connect = wire.CommandConnect(client_version="raw", protocol_version=20)
        if method is not None:
            connect.auth_method_name = method
        if data is not None:
            connect.auth_data = data
        raw.send_command(connect)
        return raw.expect_closed()
    finally:
        raw.close()


def assert_auth_error(frames: list) -> None:
    assert len(frames) == 1 and frames[0].type == T.ERROR, frames
    assert frames[0].body().error == wire.AuthenticationError


# -- accepted -------------------------------------------------------------------------------------------
def test_hs256_token_accepted_and_role_logged(broker_factory, topic):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    client = auth_client(broker, tokens.create_token(key, "alice", 600))
    try:
        round_trip(client, topic)
    finally:
        client.close()
    assert "authenticated as 'alice' with token" in broker.log_text()


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
def test_key_pair_token_accepted(broker_factory, topic, algorithm):
    private_der, public_der = tokens.create_key_pair(algorithm)
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "token_public_key": data_url(public_der),
            "token_public_alg": algorithm,
        }
    )
    private = tokens.load_private_key(data_url(private_der))
    client = auth_client(broker, tokens.create_token(private, "bob"))
    try:
        round_trip(client, topic)
    finally:
        client.close()


# -- refused --------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_bad_tokens_refused_with_authentication_error_others_unaffected(broker_factory, topic):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    good = auth_client(broker, lambda: tokens.create_token(key, "good", 600))
    consumer = good.subscribe(topic, "s")
    producer = good.create_producer(topic)
    other_key = tokens.create_secret_key()
    refused = {
        "wrong signature": ("token", tokens.create_token(other_key, "mallory").encode()),
        "expired": ("token", tokens.create_token(key, "late", -10).encode()),
        "missing": (None, None),
        "empty": ("token", b""),
        "malformed": ("token", b"not.a.jwt"),
        "binary": ("token", b"\xff\x00\xfe"),
        "no role claim": ("token", _token_without_sub(key).encode()),
        "unknown method": ("basic", b"user:password"),
    }
    for case, (method, data) in refused.items():
        frames = raw_connect(broker, method, data)
        assert_auth_error(frames), case
        producer.send(case.encode())  # the authenticated client goes on
    got = [m.data() for m in receive_n(consumer, len(refused), ack=True)]
    assert got == [case.encode() for case in refused]
    # The official client with a bad token: refused with AuthenticationError at its first request.
    bad = auth_client(broker, tokens.create_token(other_key, "mallory"), operation_timeout_seconds=3)
    try:
        with pytest.raises(pulsar.AuthenticationError):
            bad.create_producer(topic)
    finally:
        bad.close()
    good.close()
    assert "Failed to authenticate token" in broker.log_text()
    metrics = http_get(broker, "/metrics", tokens.create_token(key, "prometheus"))[1].decode()
    # 6 bad tokens here, and the official client's tries with its bad one; "none" and "basic".
    assert metric(metrics, 'pulsar_authentication_failures_total{auth_method="token"}') >= 7
    assert metric(metrics, 'pulsar_authentication_failures_total{auth_method="other"}') == 2
    assert (
        metric(metrics, 'pulsar_authentication_success_total{auth_method="token"}') == 2
    )  # client, /metrics


def test_token_with_a_trailing_newline_is_accepted(broker_factory, topic, tmp_path):
    """A token read as ``open(f).read()`` keeps the file's newline and the official client sends it
    as it is: the broker drops the whitespace around it."""
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    token_file = tmp_path / "alice.token"
    token_file.write_text(tokens.create_token(key, "alice") + "\n")
    client = auth_client(broker, token_file.read_text())
    try:
        round_trip(client, topic)
    finally:
        client.close()
    assert "authenticated as 'alice' with token" in broker.log_text()


@pytest.mark.parametrize(
    "token",
    ["garbage", "not.a.jwt", "eyJhbGciOiJIUzI1NiJ9.e30.invalid-padding!", "wrong signature"],
)
def test_official_client_gets_authentication_error_not_timeout(broker_factory, topic, token):
    """The C++ client takes an ERROR before CONNECTED for a lost connection and retries until its
    operation times out; the broker tells it at its first request instead."""
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    if token == "wrong signature":
        token = tokens.create_token(tokens.create_secret_key(), "mallory")
    # A timeout would take the whole minute: AuthenticationError must come first.
    client = auth_client(broker, token, operation_timeout_seconds=60)
    try:
        with pytest.raises(pulsar.AuthenticationError):
            client.create_producer(topic)
        with pytest.raises(pulsar.AuthenticationError):
            client.subscribe(topic, "s")
    finally:
        client.close()
    assert "authentication refused, told at its first request" in broker.log_text()


def test_refused_cpp_connection_serves_nothing(broker_factory, topic):
    """CONNECTED is only the way to tell the C++ client: every request on the connection is
    answered with AuthenticationError and the connection closed, whatever it asks."""
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    requests = [
        wire.CommandPartitionedTopicMetadata(topic=topic, request_id=7),
        wire.CommandLookupTopic(topic=topic, request_id=7),
        wire.CommandProducer(topic=topic, producer_id=1, request_id=7),
        wire.CommandSubscribe(
            topic=topic, subscription="s", sub_type=wire.CommandSubscribe.Shared, consumer_id=1, request_id=7
        ),
        wire.CommandConnect(client_version="Pulsar-CPP-v4.2.0", protocol_version=20),
    ]
    for request in requests:
        raw = RawConnection(broker.port)
        try:
            connect = wire.CommandConnect(
                client_version="Pulsar-CPP-v4.2.0", protocol_version=20, auth_method_name="token"
            )
            connect.auth_data = b"not.a.jwt"
            raw.send_command(connect)
            connected = raw.expect(T.CONNECTED).body()
            assert not connected.HasField("max_message_size")
            raw.send_command(request)
            frames = raw.expect_closed()
        finally:
            raw.close()
        assert len(frames) == 1, frames
        answer = frames[0].body()
        if isinstance(request, wire.CommandConnect):
            assert frames[0].type == T.ERROR and answer.error == wire.AuthenticationError
            continue
        assert answer.error == wire.AuthenticationError, (request, frames)
        assert answer.request_id == 7
        if isinstance(request, (wire.CommandPartitionedTopicMetadata, wire.CommandLookupTopic)):
            assert answer.response == answer.Failed
    # Nothing was made for the refused requests: no topic, no role.
    status, body = http_get(broker, "/admin/v2/persistent/public/default", tokens.create_token(key, "admin"))
    assert status == 200 and topic not in body.decode()
    assert "authenticated as" not in broker.log_text().replace("authenticated as 'admin'", "")


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{name} not in /metrics")


def _token_without_sub(key: bytes) -> str:
    import jwt

    return jwt.encode({"name": "nobody"}, key, algorithm="HS256")


def test_token_auth_claim_names_the_role(broker_factory):
    import jwt

    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key, token_auth_claim="role")
    raw = RawConnection(broker.port)
    try:
        connect = wire.CommandConnect(client_version="raw", protocol_version=20, auth_method_name="token")
        connect.auth_data = jwt.encode({"role": "ops"}, key, algorithm="HS256").encode()
        raw.send_command(connect)
        raw.expect(T.CONNECTED)
    finally:
        raw.close()
    assert_auth_error(raw_connect(broker, "token", tokens.create_token(key, "only-sub").encode()))


@pytest.mark.parametrize(
    "config, message",
    [
        ({"authentication_enabled": True}, "needs token_secret_key or token_public_key"),
        (
            {"authentication_enabled": True, "authentication_providers": ["kerberos"]},
            "unknown authentication provider 'kerberos'",
        ),
        ({"authentication_enabled": True, "token_secret_key": "file:///nonexistent/key"}, "cannot read key"),
    ],
)
def test_authentication_on_without_usable_keys_does_not_start(tmp_path, config, message):
    from magnetar.broker_process import write_config

    path = write_config(tmp_path / "broker.toml", config)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--port",
            "0",
            "--http-port",
            "0",
            "--config",
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert message in done.stderr
    assert "listening on" not in done.stderr


# -- refresh (AUTH_CHALLENGE / AUTH_RESPONSE) -----------------------------------------------------------
@pytest.mark.slow
def test_supplier_refreshes_expiring_tokens_producer_keeps_sending(broker_factory, topic):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key, authentication_refresh_check_seconds=1)
    issued = []

    def supplier() -> str:
        issued.append(time.time())
        return tokens.create_token(key, "vehicle-1", 2)

    client = auth_client(broker, supplier)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        sent = 0
        deadline = time.monotonic() + 7  # beyond two token lifetimes
        while time.monotonic() < deadline:
            producer.send(str(sent).encode())
            sent += 1
            time.sleep(0.05)  # pacing the sends, not synchronisation
        got = [m.data() for m in receive_n(consumer, sent, ack=True)]
        assert got == [str(i).encode() for i in range(sent)]
        assert len(issued) >= 3  # CONNECT, then at least two AUTH_RESPONSEs
    finally:
        client.close()
    log = broker.log_text()
    assert "authentication refused" not in log
    assert log.count("authenticated as 'vehicle-1'") == 1  # one connection throughout


@pytest.mark.slow
def test_static_token_expiring_closes_the_connection(broker_factory):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key, authentication_refresh_check_seconds=1)
    raw = RawConnection(broker.port)
    try:
        connect = wire.CommandConnect(client_version="raw", protocol_version=20, auth_method_name="token")
        connect.auth_data = tokens.create_token(key, "short", LIFETIME_S).encode()
        connect.feature_flags.supports_auth_refresh = True
        raw.send_command(connect)
        raw.expect(T.CONNECTED)
        challenge = raw.expect(T.AUTH_CHALLENGE, timeout=10).body()
        assert challenge.challenge.auth_data == b"refresh"
        assert challenge.challenge.auth_method_name == "token"
        # The same, now expired token again: refused and closed.
        response = wire.CommandAuthResponse(client_version="raw", protocol_version=20)
        response.response.auth_method_name = "token"
        response.response.auth_data = connect.auth_data
        raw.send_command(response)
        assert_auth_error(raw.expect_closed())
    finally:
        raw.close()


@pytest.mark.slow
def test_unanswered_challenge_and_no_refresh_support_close(broker_factory):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key, authentication_refresh_check_seconds=1)
    silent, old = RawConnection(broker.port, timeout=15), RawConnection(broker.port, timeout=15)
    try:
        for raw, refresh in ((silent, True), (old, False)):
            connect = wire.CommandConnect(client_version="raw", protocol_version=20, auth_method_name="token")
            connect.auth_data = tokens.create_token(key, "short", LIFETIME_S).encode()
            connect.feature_flags.supports_auth_refresh = refresh
            raw.send_command(connect)
            raw.expect(T.CONNECTED)
        frames = silent.expect_closed(timeout=10)
        assert [f.type for f in frames] == [T.AUTH_CHALLENGE, T.ERROR]
        assert_auth_error(old.expect_closed(timeout=10))
    finally:
        silent.close()
        old.close()


@pytest.mark.slow
def test_refresh_with_another_role_closes(broker_factory, topic):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key, authentication_refresh_check_seconds=1)
    raw = RawConnection(broker.port)
    try:
        connect = wire.CommandConnect(client_version="raw", protocol_version=20, auth_method_name="token")
        connect.auth_data = tokens.create_token(key, "alice", LIFETIME_S).encode()
        connect.feature_flags.supports_auth_refresh = True
        raw.send_command(connect)
        raw.expect(T.CONNECTED)
        raw.expect(T.AUTH_CHALLENGE, timeout=10)
        response = wire.CommandAuthResponse(client_version="raw", protocol_version=20)
        response.response.auth_method_name = "token"
        response.response.auth_data = tokens.create_token(key, "mallory", 600).encode()
        # A PRODUCER pipelined behind the refused AUTH_RESPONSE (one write) is not handled.
        producer = wire.CommandProducer(topic=topic, producer_id=1, request_id=1)
        raw.send(encode_frame(wrap(response)) + encode_frame(wrap(producer)))
        frames = raw.expect_closed()
        assert_auth_error(frames)
        assert "role 'mallory'" in frames[0].body().message
    finally:
        raw.close()
    status, body = http_get(broker, "/admin/v2/persistent/public/default", tokens.create_token(key, "admin"))
    assert status == 200 and topic not in body.decode()


# -- admin HTTP API -------------------------------------------------------------------------------------
def http_get(broker, path: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    request = urllib.request.Request(broker.http_url + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_admin_api_needs_a_bearer_token(broker_factory):
    import json

    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    path = "/admin/v2/namespaces/public"
    for token in (
        None,
        "garbage",
        tokens.create_token(tokens.create_secret_key(), "x"),
        tokens.create_token(key, "x", -5),
    ):
        status, body = http_get(broker, path, token)
        assert status == 401, token
        assert json.loads(body)["reason"]
    status, body = http_get(broker, path, tokens.create_token(key, "admin"))
    assert status == 200 and "public/default" in json.loads(body)
    # /metrics and the health check need credentials too by default.
    assert http_get(broker, "/metrics")[0] == 401
    assert http_get(broker, "/admin/v2/brokers/health")[0] == 401
    status, body = http_get(broker, "/metrics", tokens.create_token(key, "prometheus"))
    assert status == 200
    assert 'pulsar_authentication_failures_total{auth_method="token"}' in body.decode()


def test_metrics_and_health_left_open_by_setting(broker_factory):
    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key, authenticate_metrics_endpoint=False)
    assert http_get(broker, "/metrics")[0] == 200
    assert http_get(broker, "/admin/v2/brokers/health")[0] == 200
    assert http_get(broker, "/admin/v2/namespaces/public")[0] == 401


def test_admin_client_sends_its_token(broker_factory, topic):
    from magnetar.client.admin import AdminClient, UnauthorizedError

    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    client = auth_client(broker, tokens.create_token(key, "p"))
    try:
        producer = client.create_producer(topic)
        msg_id = producer.send(b"x")
    finally:
        client.close()
    with pytest.raises(UnauthorizedError):
        AdminClient(broker.http_url).index_for_message_id(topic, msg_id)
    admin = AdminClient(broker.http_url, token=tokens.create_token(key, "admin"))
    assert admin.index_for_message_id(topic, msg_id) == 0


# -- magnetar tokens, as a subprocess -------------------------------------------------------------------
def magnetar_tokens(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "magnetar", "tokens", *args], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_cli_secret_key_and_token_accepted(broker_factory, topic, tmp_path: Path):
    key_file = tmp_path / "secret.key"
    magnetar_tokens("create-secret-key", "--output", str(key_file))
    assert len(key_file.read_bytes()) == 32  # raw bytes, as pulsar tokens writes them
    token = magnetar_tokens(
        "create", "--secret-key", f"file://{key_file}", "--subject", "cli", "--expiry-time", "1h"
    )
    assert '"sub": "cli"' in magnetar_tokens("show", token)
    broker = broker_factory({"authentication_enabled": True, "token_secret_key": f"file://{key_file}"})
    client = auth_client(broker, token)
    try:
        round_trip(client, topic)
    finally:
        client.close()


def test_cli_key_pair_and_token_accepted(broker_factory, topic, tmp_path: Path):
    private, public = tmp_path / "private.key", tmp_path / "public.key"
    magnetar_tokens(
        "create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public)
    )
    token = magnetar_tokens("create", "--private-key", f"file://{private}", "--subject", "rsa-role")
    magnetar_tokens("validate", token, "--public-key", str(public))
    broker = broker_factory({"authentication_enabled": True, "token_public_key": str(public)})
    client = auth_client(broker, token)
    try:
        round_trip(client, topic)
    finally:
        client.close()
