import ssl

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.tls import TlsConfigError, server_context
from magnetar.broker_process import listening_addresses, parse_listening
from tests.interop.tls_certs import make_tls_files, tls_settings


def test_defaults_are_documented_values():
    config = BrokerConfig()
    assert config.max_message_size == 5 * 1024 * 1024
    assert config.fsync_policy == "always"
    assert config.port == 6650


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('port = 7000\nfsync_policy = "never"\ndata_dir = "/tmp/x"\n')
    config = BrokerConfig.load(path, port=7001, host=None)
    assert config.port == 7001
    assert config.fsync_policy == "never"
    assert str(config.data_dir) == "/tmp/x"
    assert config.host == "127.0.0.1"


def test_unknown_and_invalid_settings_are_errors(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("no_such_setting = 1\n")
    with pytest.raises(ValueError, match="no_such_setting"):
        BrokerConfig.load(path)
    with pytest.raises(ValueError, match="fsync_policy"):
        BrokerConfig.load(None, fsync_policy="sometimes")


# -- TLS (broker/tls.py) --------------------------------------------------------------------------------


def test_tls_is_off_by_default():
    config = BrokerConfig()
    assert config.broker_service_port_tls is None and config.web_service_port_tls is None
    assert not config.tls_require_trusted_client_cert_on_connect


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"broker_service_port_tls": 6651}, "tls_certificate_file_path and tls_key_file_path is not"),
        ({"web_service_port_tls": 8443, "tls_key_file_path": "k.pem"}, "tls_certificate_file_path is not"),
        ({"broker_service_port_tls": 70000}, "must be a port number"),
        (
            {"broker_service_port_tls": 0, "tls_require_trusted_client_cert_on_connect": True},
            "needs tls_trust_certs_file_path",
        ),
        ({"broker_service_port_tls": 0, "tls_protocols": ["TLSv1.1"]}, "tls_protocols"),
    ],
)
def test_tls_settings_that_cannot_work(settings, message):
    files = {"tls_certificate_file_path": "c.pem", "tls_key_file_path": "k.pem"}
    if "is not" not in message:
        settings = {**files, **settings}
    with pytest.raises(TlsConfigError, match=message):
        BrokerConfig.load(None, **settings)


def test_tls_server_context_from_the_files(tmp_path):
    files = make_tls_files(tmp_path)
    config = BrokerConfig.load(None, **tls_settings(files, tls_protocols=["TLSv1.3"]))
    ctx = server_context(config)
    assert ctx.verify_mode == ssl.CERT_OPTIONAL  # a client certificate is checked if presented
    assert ctx.minimum_version == ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    required = BrokerConfig.load(None, **tls_settings(files, tls_require_trusted_client_cert_on_connect=True))
    assert server_context(required).verify_mode == ssl.CERT_REQUIRED
    insecure = BrokerConfig.load(None, **tls_settings(files, tls_allow_insecure_connection=True))
    assert server_context(insecure).verify_mode == ssl.CERT_NONE
    wrong_key = BrokerConfig.load(None, **tls_settings(files, files.server_cert, files.client_key))
    with pytest.raises(TlsConfigError, match="cannot use certificate"):
        server_context(wrong_key)
    bad_ciphers = BrokerConfig.load(None, **tls_settings(files, tls_ciphers=["NO-SUCH-CIPHER"]))
    with pytest.raises(TlsConfigError, match="tls_ciphers"):
        server_context(bad_ciphers)


def test_listening_line_with_and_without_tls():
    old = "Magnetar 0.1.0 listening on pulsar://127.0.0.1:6650 and http://127.0.0.1:8080, data in ./data\n"
    assert parse_listening(old) == ("127.0.0.1", 6650, "127.0.0.1", 8080, None, None)
    both = (
        "Magnetar 0.1.0 listening on pulsar://127.0.0.1:6650 and http://127.0.0.1:8080 "
        "(TLS: pulsar+ssl://127.0.0.1:6651 and https://127.0.0.1:8443), data in ./data\n"
    )
    assert parse_listening(both) == ("127.0.0.1", 6650, "127.0.0.1", 8080, 6651, 8443)
    https_only = "listening on pulsar://h:1 and http://h:2 (TLS: https://h:3), data in d\n"
    assert parse_listening(https_only) == ("h", 1, "h", 2, None, 3)


@pytest.mark.parametrize(
    ("ports", "text"),
    [
        ((6650, 8080, None, None), "pulsar://h:6650 and http://h:8080"),
        (
            (6650, 8080, 6651, 8443),
            "pulsar://h:6650 and http://h:8080 (TLS: pulsar+ssl://h:6651 and https://h:8443)",
        ),
        ((None, None, 6651, 8443), "pulsar+ssl://h:6651 and https://h:8443"),
        ((None, 8080, 6651, 8443), "http://h:8080 (TLS: pulsar+ssl://h:6651 and https://h:8443)"),
        ((6650, None, 6651, 8443), "pulsar://h:6650 (TLS: pulsar+ssl://h:6651 and https://h:8443)"),
        ((None, 8080, 6651, None), "http://h:8080 (TLS: pulsar+ssl://h:6651)"),
    ],
)
def test_listening_line_for_each_combination_of_ports(ports, text):
    """Plain only, the line is what it always was; a port that is off is named nowhere and parses as None."""
    assert listening_addresses("h", *ports) == text
    line = f"2026-01-01 INFO Magnetar 0.1.0 listening on {text}, data in /tmp/http://x:1\n"
    assert parse_listening(line) == ("h", ports[0], "h", ports[1], ports[2], ports[3])


def test_tls_only_settings():
    """A plain port may be turned off only where its TLS twin is served (else nothing would listen)."""
    with pytest.raises(TlsConfigError, match="broker_service_port_enabled is false"):
        BrokerConfig.load(None, broker_service_port_enabled=False)
    with pytest.raises(TlsConfigError, match="web_service_port_enabled is false"):
        BrokerConfig.load(None, web_service_port_enabled=False)
    defaults = BrokerConfig()
    assert defaults.broker_service_port_enabled and defaults.web_service_port_enabled
