"""Our client over pulsar+ssl:// against our broker, with the official client's TLS options, and
across with the official client (one produces, the other consumes)."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.client import AuthenticationTLS, ConnectError, InvalidConfiguration, TlsError
from magnetar.client.admin import AdminClient
from tests.interop.conftest import CLIENT_LOGGER
from tests.interop.support import round_trip
from tests.interop.tls_certs import tls_settings

pytestmark = pytest.mark.interop


@pytest.fixture
def tls_broker(broker_factory, tls_files):
    return broker_factory(tls_settings(tls_files))


@pytest.fixture
def mtls_broker(broker_factory, tls_files):
    return broker_factory(tls_settings(tls_files, tls_require_trusted_client_cert_on_connect=True))


def test_our_client_over_tls(tls_broker, magnetar_factory, tls_files, topic):
    client = magnetar_factory(tls_broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca))
    payloads = [b"small", b"y" * 200_000, bytes(range(256)) * 16_384]  # 4 MiB in one frame
    assert round_trip(client, topic, payloads) == payloads
    validating = magnetar_factory(
        tls_broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca), tls_validate_hostname=True
    )
    assert round_trip(validating, topic, [b"validated"]) == [b"validated"]


def test_official_and_ours_across_over_tls(tls_broker, magnetar_factory, tls_files, topic):
    ours = magnetar_factory(tls_broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca))
    official = pulsar.Client(
        tls_broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca), logger=CLIENT_LOGGER
    )
    try:
        our_consumer = ours.subscribe(topic + "-a", "sub")
        their_consumer = official.subscribe(topic + "-b", "sub")
        official.create_producer(topic + "-a").send(b"official to ours")
        ours.create_producer(topic + "-b").send(b"ours to official")
        assert our_consumer.receive(10_000).data() == b"official to ours"
        assert their_consumer.receive(10_000).data() == b"ours to official"
    finally:
        official.close()


def test_our_client_mutual_tls(mtls_broker, magnetar_factory, tls_files, topic):
    trust = str(tls_files.ca)
    cert, key = str(tls_files.client_cert), str(tls_files.client_key)
    with_auth = magnetar_factory(
        mtls_broker.service_url_tls,
        tls_trust_certs_file_path=trust,
        authentication=AuthenticationTLS(cert, key),
    )
    assert round_trip(with_auth, topic, [b"auth"]) == [b"auth"]
    with_options = magnetar_factory(
        mtls_broker.service_url_tls,
        tls_trust_certs_file_path=trust,
        tls_certificate_file_path=cert,
        tls_private_key_file_path=key,
    )
    assert round_trip(with_options, topic, [b"options"]) == [b"options"]
    without = magnetar_factory(mtls_broker.service_url_tls, tls_trust_certs_file_path=trust)
    with pytest.raises(TlsError, match="refused the TLS connection"):
        without.create_producer(topic)


@pytest.mark.slow
def test_our_client_tls_errors_are_clear(broker_factory, tls_broker, magnetar_factory, tls_files, topic):
    other = broker_factory(tls_settings(tls_files, tls_files.other_host_cert, tls_files.other_host_key))
    expired = broker_factory(tls_settings(tls_files, tls_files.expired_cert, tls_files.expired_key))
    trust = str(tls_files.ca)
    cases = [
        (
            tls_broker.service_url_tls,
            {"tls_trust_certs_file_path": str(tls_files.wrong_ca)},
            "CERTIFICATE_VERIFY_FAILED",
        ),
        (
            other.service_url_tls,
            {"tls_trust_certs_file_path": trust, "tls_validate_hostname": True},
            "mismatch",
        ),
        (expired.service_url_tls, {"tls_trust_certs_file_path": trust}, "certificate has expired"),
    ]
    for url, options, reason in cases:
        client = magnetar_factory(url, **options)
        with pytest.raises(TlsError, match=reason):
            client.create_producer(topic)
    plain_on_tls_port = magnetar_factory(f"pulsar://127.0.0.1:{tls_broker.tls_port}")
    with pytest.raises(ConnectError, match="use a pulsar\\+ssl:// URL"):
        plain_on_tls_port.create_producer(topic)
    with pytest.raises(InvalidConfiguration, match="no such file"):
        magnetar_factory(tls_broker.service_url_tls, tls_trust_certs_file_path=str(tls_files.ca) + ".gone")
    # The broker serves everyone else as before.
    client = magnetar_factory(tls_broker.service_url_tls, tls_trust_certs_file_path=trust)
    assert round_trip(client, topic, [b"after"]) == [b"after"]


def test_admin_client_over_https(mtls_broker, magnetar_factory, tls_files, topic):
    client = magnetar_factory(
        mtls_broker.service_url_tls,
        tls_trust_certs_file_path=str(tls_files.ca),
        authentication=AuthenticationTLS(str(tls_files.client_cert), str(tls_files.client_key)),
    )
    msg_id = client.create_producer(topic).send(b"indexed")
    admin = AdminClient(
        mtls_broker.https_url,
        tls_trust_certs_file_path=str(tls_files.ca),
        tls_certificate_file_path=str(tls_files.client_cert),
        tls_key_file_path=str(tls_files.client_key),
    )
    assert admin.index_for_message_id(topic, msg_id) == 0
    assert admin.message_id_for_index(topic, 0).entry_id() == msg_id.entry_id()
