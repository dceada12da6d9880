"""TLS as Pulsar has it, with the official client: pulsar+ssl:// on its own port, HTTPS on the
admin port, hostname validation, mutual TLS, and clients that get TLS wrong.

Certificates are made at run time (tls_certs.py). A client the handshake fails for gets an
error on its side, and the broker goes on serving everyone else, on both ports.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import urllib.error
import urllib.request
import uuid

import pulsar
import pytest

from magnetar.broker_process import BrokerProcess, BrokerProcessError
from magnetar.client import AuthenticationToken, Client
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.security import tokens

from .conftest import CLIENT_LOGGER
from .support import RawConnection, round_trip
from .tls_certs import CLIENT_ROLE, tls_settings

pytestmark = pytest.mark.interop

#: Clients that are to fail are given this long: the official client retries a connection
#: closed during its handshake until its operation timeout.
FAILING_TIMEOUT_S = 2


@pytest.fixture
def official_factory():
    """Official clients with any options, closed at teardown."""
    clients: list[pulsar.Client] = []

    def make(service_url: str, **options) -> pulsar.Client:
        options.setdefault("operation_timeout_seconds", 10)
        client = pulsar.Client(service_url, logger=CLIENT_LOGGER, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(pulsar.PulsarException):
            client.close()


class Canary:
    """A producer and consumer kept open across a test: each ``check`` sends one message and
    receives it, so a broker that failed anyone else along the way shows."""

    def __init__(self, client: pulsar.Client, topic: str) -> None:
        self.consumer = client.subscribe(topic, "canary")
        self.producer = client.create_producer(topic)
        self.sent = 0

    def check(self) -> None:
        self.sent += 1
        data = b"canary-%d" % self.sent
        self.producer.send(data)
        msg = self.consumer.receive(10_000)
        self.consumer.acknowledge(msg)
        assert msg.data() == data


def refused(client: pulsar.Client, topic: str) -> pulsar.PulsarException:
    with pytest.raises((pulsar.ConnectError, pulsar.Timeout)) as info:
        client.create_producer(topic)
    return info.value


def https_get(url: str, **context_options) -> tuple[int, str]:
    ctx = ssl.create_default_context(cafile=context_options.pop("cafile", None))
    if "cert" in context_options:
        ctx.load_cert_chain(context_options.pop("cert"), context_options.pop("key"))
    with urllib.request.urlopen(url, timeout=10, context=ctx) as response:
        return response.status, response.read().decode()


# -- pulsar+ssl:// ------------------------------------------------------------------------------------


def test_official_client_produces_and_consumes_over_tls(broker_factory, official_factory, tls_files, topic):
    broker = broker_factory(tls_settings(tls_files))
    assert broker.tls_port not in (None, 0, broker.port)
    client = official_factory(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca))
    payloads = [b"small", b"x" * 100_000, bytes(range(256)) * 16_384]  # the last one 4 MiB, in one frame
    assert round_trip(client, topic, payloads) == payloads


def test_lookup_answers_the_tls_address_only_where_tls_is_served(broker_factory, tls_files, topic):
    plain = broker_factory()
    assert plain.tls_port is None and plain.https_port is None
    secure = broker_factory(tls_settings(tls_files))
    for broker, tls_url in ((plain, None), (secure, secure.service_url_tls)):
        raw = RawConnection(broker.port)
        try:
            raw.handshake()
            raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=7))
            answer = raw.expect(wire.BaseCommand.LOOKUP_RESPONSE).body()
        finally:
            raw.close()
        assert answer.broker_service_url == broker.service_url
        assert (answer.broker_service_url_tls or None) == tls_url


def test_hostname_validation(broker_factory, official_factory, tls_files, topic):
    named = broker_factory(tls_settings(tls_files))
    other = broker_factory(tls_settings(tls_files, tls_files.other_host_cert, tls_files.other_host_key))
    trust = str(tls_files.ca)
    # The certificate names 127.0.0.1: validated, it is accepted.
    client = official_factory(
        named.service_url_tls, tls_trust_certs_file_path=trust, tls_validate_hostname=True
    )
    assert round_trip(client, topic, [b"named"]) == [b"named"]
    # Signed by the trusted CA but naming broker.example.com: refused when the host is validated ...
    client = official_factory(
        other.service_url_tls,
        tls_trust_certs_file_path=trust,
        tls_validate_hostname=True,
        operation_timeout_seconds=FAILING_TIMEOUT_S,
    )
    refused(client, topic)
    # ... and accepted when it is not (the official client's default).
    client = official_factory(other.service_url_tls, tls_trust_certs_file_path=trust)
    assert round_trip(client, topic, [b"unvalidated"]) == [b"unvalidated"]


# -- mutual TLS ---------------------------------------------------------------------------------------


def certificate_client(official_factory, broker, tls_files):
    """An official client on the ``pulsar+ssl://`` port that proves itself with the test client's
    certificate (Pulsar's ``AuthenticationTLS``)."""
    return official_factory(
        broker.service_url_tls,
        tls_trust_certs_file_path=str(tls_files.ca),
        authentication=pulsar.AuthenticationTLS(str(tls_files.client_cert), str(tls_files.client_key)),
    )


@pytest.mark.slow
def test_mutual_tls(broker_factory, official_factory, tls_files, topic):
    broker = broker_factory(tls_settings(tls_files, tls_require_trusted_client_cert_on_connect=True))
    trust = str(tls_files.ca)
    cert, key = str(tls_files.client_cert), str(tls_files.client_key)
    with_auth = certificate_client(official_factory, broker, tls_files)
    assert round_trip(with_auth, topic, [b"authenticated"]) == [b"authenticated"]
    with_options = official_factory(
        broker.service_url_tls,
        tls_trust_certs_file_path=trust,
        tls_certificate_file_path=cert,
        tls_private_key_file_path=key,
    )
    assert round_trip(with_options, topic, [b"options"]) == [b"options"]
    # No client certificate: the handshake is refused.
    without = official_factory(
        broker.service_url_tls, tls_trust_certs_file_path=trust, operation_timeout_seconds=FAILING_TIMEOUT_S
    )
    refused(without, topic)
    # The certificated clients were not disturbed.
    assert round_trip(with_auth, topic, [b"still here"]) == [b"still here"]


@pytest.mark.slow
def test_tls_authentication_provider_takes_the_role_from_the_certificate(
    broker_factory, official_factory, tls_files, topic
):
    """Pulsar's AuthenticationProviderTls: with authentication on and the ``tls`` provider, the
    verified client certificate's CN is the role; a client without one is refused at CONNECT."""
    settings = tls_settings(tls_files, authentication_enabled=True, authentication_providers=["tls"])
    broker = broker_factory(settings)
    trust = str(tls_files.ca)
    with_cert = certificate_client(official_factory, broker, tls_files)
    assert round_trip(with_cert, topic, [b"by certificate"]) == [b"by certificate"]
    assert f"authenticated as '{CLIENT_ROLE}' with tls" in broker.log_text()
    # TLS without a client certificate, and the plain port: no role, so AuthenticationError.
    for url, options in (
        (broker.service_url_tls, {"tls_trust_certs_file_path": trust}),
        (broker.service_url, {}),
    ):
        client = official_factory(url, operation_timeout_seconds=FAILING_TIMEOUT_S, **options)
        with pytest.raises(pulsar.AuthenticationError):
            client.create_producer(topic)
    raw = RawConnection(broker.port)
    raw.send_command(wire.CommandConnect(client_version="raw", protocol_version=21, auth_method_name="tls"))
    error = raw.expect(wire.BaseCommand.ERROR).command.error
    assert error.error == wire.AuthenticationError
    assert "unable to authenticate with TLS certificate" in error.message
    raw.close()
    assert round_trip(with_cert, topic, [b"still here"]) == [b"still here"]


def test_tls_authentication_provider_without_a_trust_file_does_not_start(broker_factory, tls_files):
    settings = tls_settings(tls_files, authentication_enabled=True, authentication_providers=["tls"])
    del settings["tls_trust_certs_file_path"]
    with pytest.raises(BrokerProcessError, match="exited with 1") as info:
        broker_factory(settings)
    assert "needs tls_trust_certs_file_path" in str(info.value)


@pytest.mark.slow
def test_token_authenticated_producers_over_tls_official_and_ours(
    broker_factory, official_factory, tls_files, topic, tmp_path
):
    """security.md's walk-through: a secret key file, a broker with the token and tls providers
    and a TLS port, then a token-authenticated producer over pulsar+ssl:// with the official
    client and with ours, each read by the other; a token signed with another key is refused."""
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(tokens.create_secret_key())
    settings = tls_settings(
        tls_files,
        authentication_enabled=True,
        authentication_providers=["token", "tls"],
        token_secret_key=f"file://{key_file}",
    )
    broker = broker_factory(settings)
    trust = str(tls_files.ca)
    key = tokens.load_secret_key(f"file://{key_file}")
    official = official_factory(
        broker.service_url_tls,
        tls_trust_certs_file_path=trust,
        tls_validate_hostname=True,
        authentication=pulsar.AuthenticationToken(tokens.create_token(key, "vehicle-17", 600)),
    )
    ours = Client(
        broker.service_url_tls,
        tls_trust_certs_file_path=trust,
        tls_validate_hostname=True,
        authentication=AuthenticationToken(lambda: tokens.create_token(key, "ops", 600)),
    )
    try:
        official_consumer = official.subscribe(topic, "official")
        ours_consumer = ours.subscribe(topic, "ours")
        official.create_producer(topic).send(b"from the official client")
        ours.create_producer(topic).send(b"from ours")
        got_official = sorted(official_consumer.receive(10_000).data() for _ in range(2))
        got_ours = sorted(ours_consumer.receive(timeout_millis=10_000).data() for _ in range(2))
    finally:
        ours.close()
    assert got_official == got_ours == [b"from ours", b"from the official client"]
    log = broker.log_text()
    assert "authenticated as 'vehicle-17' with token" in log
    assert "authenticated as 'ops' with token" in log
    forged = official_factory(
        broker.service_url_tls,
        tls_trust_certs_file_path=trust,
        operation_timeout_seconds=FAILING_TIMEOUT_S,
        authentication=pulsar.AuthenticationToken(tokens.create_token(tokens.create_secret_key(), "x")),
    )
    with pytest.raises(pulsar.AuthenticationError):
        forged.create_producer(topic)


# -- clients that get TLS wrong -------------------------------------------------------------------------


@pytest.mark.slow
def test_bad_tls_clients_leave_the_broker_unaffected(broker_factory, official_factory, tls_files, topic):
    broker = broker_factory(tls_settings(tls_files))
    trust = str(tls_files.ca)
    plain_canary = Canary(official_factory(broker.service_url), topic + "-plain")
    tls_canary = Canary(
        official_factory(broker.service_url_tls, tls_trust_certs_file_path=trust), topic + "-tls"
    )
    plain_canary.check()
    tls_canary.check()

    fast = {"operation_timeout_seconds": FAILING_TIMEOUT_S}
    # A plaintext client on the TLS port.
    refused(official_factory(f"pulsar://127.0.0.1:{broker.tls_port}", **fast), topic)
    # A TLS client on the plain port.
    refused(
        official_factory(f"pulsar+ssl://127.0.0.1:{broker.port}", tls_trust_certs_file_path=trust, **fast),
        topic,
    )
    # A client that trusts another CA, and one that trusts only the system's CAs.
    wrong = official_factory(
        broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.wrong_ca), **fast
    )
    assert isinstance(refused(wrong, topic), pulsar.ConnectError)
    assert isinstance(refused(official_factory(broker.service_url_tls, **fast), topic), pulsar.ConnectError)

    plain_canary.check()
    tls_canary.check()
    fresh = official_factory(broker.service_url_tls, tls_trust_certs_file_path=trust)
    assert round_trip(fresh, topic, [b"after"]) == [b"after"]
    assert "Traceback" not in broker.log_tail()


def test_expired_server_certificate_is_refused_by_the_client(
    broker_factory, official_factory, tls_files, topic
):
    broker = broker_factory(tls_settings(tls_files, tls_files.expired_cert, tls_files.expired_key))
    plain_canary = Canary(official_factory(broker.service_url), topic + "-plain")
    client = official_factory(
        broker.service_url_tls,
        tls_trust_certs_file_path=str(tls_files.ca),
        operation_timeout_seconds=FAILING_TIMEOUT_S,
    )
    assert isinstance(refused(client, topic), pulsar.ConnectError)
    plain_canary.check()
    # The broker serves TLS all the same: a client told to check nothing gets through.
    insecure = official_factory(broker.service_url_tls, tls_allow_insecure_connection=True)
    assert round_trip(insecure, topic, [b"insecure"]) == [b"insecure"]


# -- HTTPS --------------------------------------------------------------------------------------------


def test_https_admin_api_and_metrics(broker_factory, official_factory, tls_files, topic):
    broker = broker_factory(tls_settings(tls_files))
    assert broker.https_port not in (None, 0, broker.http_port)
    client = official_factory(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca))
    round_trip(client, topic, [b"counted"])
    status, text = https_get(broker.https_url + "/metrics", cafile=str(tls_files.ca))
    assert status == 200 and "pulsar_" in text
    status, text = https_get(broker.https_url + "/admin/v2/tenants", cafile=str(tls_files.ca))
    assert status == 200 and "public" in text
    # Plain HTTP is served as before.
    with urllib.request.urlopen(broker.http_url + "/admin/v2/tenants", timeout=10) as response:
        assert response.status == 200
    # Without the CA the certificate is not trusted.
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        https_get(broker.https_url + "/metrics")


def test_https_with_mutual_tls_wants_a_client_certificate(broker_factory, tls_files):
    broker = broker_factory(tls_settings(tls_files, tls_require_trusted_client_cert_on_connect=True))
    ca = str(tls_files.ca)
    status, _ = https_get(
        broker.https_url + "/admin/v2/tenants",
        cafile=ca,
        cert=str(tls_files.client_cert),
        key=str(tls_files.client_key),
    )
    assert status == 200
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        https_get(broker.https_url + "/admin/v2/tenants", cafile=ca)


# -- start-up ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"broker_service_port_tls": 0}, "tls_certificate_file_path and tls_key_file_path is not"),
        (
            {"web_service_port_tls": 0, "tls_certificate_file_path": "/nonexistent/cert.pem"},
            "tls_key_file_path",
        ),
        ("missing-file", "tls_certificate_file_path: no such file"),
        ("wrong-key", "cannot use certificate"),
        ("require-without-trust", "needs tls_trust_certs_file_path"),
    ],
)
def test_tls_settings_that_cannot_work_stop_the_start(broker_factory, tls_files, settings, message):
    if settings == "missing-file":
        settings = tls_settings(tls_files, tls_files.server_cert.with_name(f"gone-{uuid.uuid4().hex}.pem"))
    elif settings == "wrong-key":
        settings = tls_settings(tls_files, tls_files.server_cert, tls_files.client_key)
    elif settings == "require-without-trust":
        settings = tls_settings(tls_files, tls_require_trusted_client_cert_on_connect=True)
        del settings["tls_trust_certs_file_path"]
    with pytest.raises(BrokerProcessError, match="exited with 1") as info:
        broker_factory(settings)
    assert message in str(info.value)
    assert "Traceback" not in str(info.value)


# -- TLS only: the plain ports off ---------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_tls_only_broker_serves_no_plain_port(official_factory, tls_files, topic, tmp_path):
    plain_port, plain_http_port = free_port(), free_port()
    settings = tls_settings(tls_files, broker_service_port_enabled=False, web_service_port_enabled=False)
    broker = BrokerProcess(tmp_path / "tls-only", settings)
    # The plain ports asked for on the command line are not bound (the settings turn them off).
    broker.start(port=plain_port, http_port=plain_http_port)
    try:
        assert broker.port is None and broker.http_port is None
        assert broker.tls_port is not None and broker.https_port is not None
        (line,) = [x for x in broker.log_path.read_text().splitlines() if "listening on" in x]
        assert "pulsar://" not in line and "http://" not in line, line
        with pytest.raises(BrokerProcessError, match="broker_service_port_enabled"):
            broker.service_url  # noqa: B018
        with pytest.raises(BrokerProcessError, match="web_service_port_enabled"):
            broker.http_url  # noqa: B018
        # Nothing listens on the plain ports: the official client cannot connect, nor HTTP.
        plain = official_factory(
            f"pulsar://127.0.0.1:{plain_port}", operation_timeout_seconds=FAILING_TIMEOUT_S
        )
        refused(plain, topic)
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(f"http://127.0.0.1:{plain_http_port}/admin/v2/tenants", timeout=5)
        # pulsar+ssl:// and HTTPS work.
        client = official_factory(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca))
        assert round_trip(client, topic, [b"tls", b"only"]) == [b"tls", b"only"]
        status, text = https_get(broker.https_url + "/admin/v2/tenants", cafile=str(tls_files.ca))
        assert status == 200 and "public" in text
        # LOOKUP names only the port that is served.
        raw = RawConnection(broker.tls_port)
        raw.sock = ssl.create_default_context(cafile=str(tls_files.ca)).wrap_socket(
            raw.sock, server_hostname="127.0.0.1"
        )
        try:
            raw.handshake()
            raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=7))
            answer = raw.expect(wire.BaseCommand.LOOKUP_RESPONSE).body()
        finally:
            raw.close()
        assert not answer.HasField("broker_service_url")
        assert answer.broker_service_url_tls == broker.service_url_tls
    finally:
        broker.stop()


def test_tls_only_binary_with_plain_http(broker_factory, official_factory, tls_files, topic):
    """Each plain port is turned off on its own: pulsar+ssl:// only, HTTP and HTTPS both served."""
    broker = broker_factory(tls_settings(tls_files, broker_service_port_enabled=False))
    assert broker.port is None and broker.http_port is not None and broker.https_port is not None
    client = official_factory(broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca))
    assert round_trip(client, topic, [b"x"]) == [b"x"]
    with urllib.request.urlopen(broker.http_url + "/admin/v2/tenants", timeout=10) as response:
        assert response.status == 200


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"broker_service_port_enabled": False},
            "broker_service_port_enabled is false and broker_service_port_tls",
        ),
        ({"web_service_port_enabled": False}, "web_service_port_enabled is false and web_service_port_tls"),
    ],
)
def test_every_port_of_a_kind_off_stops_the_start(broker_factory, settings, message):
    with pytest.raises(BrokerProcessError, match="exited with 1") as info:
        broker_factory(settings)
    assert message in str(info.value)
    assert "Traceback" not in str(info.value)
