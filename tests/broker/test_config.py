import dataclasses
import json
import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.broker import startup
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


@pytest.mark.parametrize(
    ("port", "http_port"),
    [(6650, 8080), (6651, 8081), (7000, 8430), (0, 0), (64105, 65535), (64106, 0), (65535, 0)],
)
def test_http_port_follows_port_when_only_port_is_set(port, http_port):
    """A second broker started with ``--port 6651`` alone must not fail on the first one's 8080."""
    config, sources = BrokerConfig.load_with_sources(None, port=port)
    assert config.http_port == http_port
    assert sources["http_port"] == "derived from port, command line"


def test_http_port_set_anywhere_wins_over_the_derived_one(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("port = 7000\n")
    config, sources = BrokerConfig.load_with_sources(path)
    assert config.http_port == 8430 and sources["http_port"] == f"derived from port, file {path}"
    assert BrokerConfig.load(path, http_port=9000).http_port == 9000
    assert BrokerConfig.load(path, {"MAGNETAR_HTTP_PORT": "9001"}).http_port == 9001
    assert BrokerConfig.load(None, {"MAGNETAR_PORT": "7001"}).http_port == 8431
    both = tmp_path / "both.toml"
    both.write_text("port = 7000\nhttp_port = 9002\n")
    assert BrokerConfig.load(both, port=7100).http_port == 9002
    config, sources = BrokerConfig.load_with_sources(None)
    assert (config.port, config.http_port, sources["http_port"]) == (6650, 8080, "default")


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
        startup.load(None, **settings)


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


class _UnreadableFiles(ssl.SSLContext):
    """What ``ssl`` raises for a certificate, key or CA file its process may not read (as a user
    other than root sees a mode 000 file): an OSError naming no file."""

    def load_cert_chain(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    def load_verify_locations(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")


def test_unreadable_tls_files_are_named(tmp_path, monkeypatch):
    files = make_tls_files(tmp_path)
    monkeypatch.setattr(ssl, "SSLContext", _UnreadableFiles)
    config = BrokerConfig.load(None, **tls_settings(files))
    with pytest.raises(
        TlsConfigError, match=r"cannot read certificate .* or key .*: Permission denied"
    ) as info:
        server_context(config)
    assert str(files.server_cert) in str(info.value) and str(files.server_key) in str(info.value)
    monkeypatch.setattr(_UnreadableFiles, "load_cert_chain", lambda self, *args, **kwargs: None)
    with pytest.raises(
        TlsConfigError, match=r"tls_trust_certs_file_path .*: cannot read it: Permission denied"
    ):
        server_context(config)


def test_listening_line_with_and_without_tls():
    old = "Magnetar 0.1.0 listening on pulsar://127.0.0.1:6650 and http://127.0.0.1:8080, data in ./data\n"
    assert parse_listening(old) == ("127.0.0.1", 6650, "127.0.0.1", 8080, None, None, None, None)
    both = (
        "Magnetar 0.1.0 listening on pulsar://127.0.0.1:6650 and http://127.0.0.1:8080 "
        "(TLS: pulsar+ssl://127.0.0.1:6651 and https://127.0.0.1:8443), data in ./data\n"
    )
    assert parse_listening(both) == ("127.0.0.1", 6650, "127.0.0.1", 8080, 6651, 8443, None, None)
    https_only = "listening on pulsar://h:1 and http://h:2 (TLS: https://h:3), data in d\n"
    assert parse_listening(https_only) == ("h", 1, "h", 2, None, 3, None, None)
    with_mqtt = "listening on pulsar://h:1 and http://h:2 and mqtt://h:1883, data in d\n"
    assert parse_listening(with_mqtt) == ("h", 1, "h", 2, None, None, 1883, None)
    assert listening_addresses("h", 1, 2, None, None, 1883) == "pulsar://h:1 and http://h:2 and mqtt://h:1883"
    both_mqtt = listening_addresses("h", 1, 2, 3, None, 1883, 8883)
    assert (
        both_mqtt
        == "pulsar://h:1 and http://h:2 and mqtt://h:1883 (TLS: pulsar+ssl://h:3 and mqtts://h:8883)"
    )
    assert parse_listening(f"listening on {both_mqtt}, data in d") == ("h", 1, "h", 2, 3, None, 1883, 8883)
    mqtts_only = listening_addresses("h", 1, 2, None, None, None, 8883)
    parsed = parse_listening(f"listening on {mqtts_only}, data in d")
    assert parsed == ("h", 1, "h", 2, None, None, None, 8883)


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
    assert parse_listening(line) == ("h", ports[0], "h", ports[1], ports[2], ports[3], None, None)


def test_tls_only_settings():
    """A plain port may be turned off only where its TLS twin is served (else nothing would listen)."""
    with pytest.raises(TlsConfigError, match="broker_service_port_enabled is false"):
        startup.load(None, broker_service_port_enabled=False)
    with pytest.raises(TlsConfigError, match="web_service_port_enabled is false"):
        startup.load(None, web_service_port_enabled=False)
    defaults = BrokerConfig()
    assert defaults.broker_service_port_enabled and defaults.web_service_port_enabled


# -- types, sources and environment variables (config_sources.py) --------------------------------


def test_a_value_of_the_wrong_type_in_the_file_is_refused_naming_the_setting_and_the_file(tmp_path):
    path = tmp_path / "m.toml"
    for line, wanted in (
        ('deduplication_enabled = "false"', "a valid boolean"),  # a string would be taken as true
        ('port = "6650"', "a valid integer"),
        ("port = true", "a valid integer"),  # a bool is no port number
        ("port = 70000", "less than or equal to 65535"),  # a range
        ("host = 1", "a valid string"),
        ('superuser_roles = ["admin", 1]', "a valid string at item 1"),
        ('fsync_policy = "sometimes"', "'always', 'interval' or 'never'"),
        ("preallocate_bytes = 100_000_000", "less than or equal to 67108864"),  # StorageConfig's range
    ):
        path.write_text(line + "\n")
        name = line.split(" = ")[0]
        with pytest.raises(ValueError, match=rf"setting {name} = .*\(file {path}\) must be .*{wanted}"):
            BrokerConfig.load(path)


def test_numbers_and_paths_are_taken_in_the_forms_toml_writes_them(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('broadcast_reconnect_grace_seconds = 5\ndata_dir = "/tmp/d"\n')
    config = BrokerConfig.load(path)
    assert config.broadcast_reconnect_grace_seconds == 5.0 and isinstance(
        config.broadcast_reconnect_grace_seconds, float
    )
    assert config.data_dir == Path("/tmp/d")


def test_environment_variables_come_after_the_file_and_before_the_command_line(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('port = 7000\nfsync_policy = "interval"\nhost = "127.0.0.2"\n')
    environ = {
        "MAGNETAR_PORT": "7100",
        "MAGNETAR_FSYNC_POLICY": "never",
        "MAGNETAR_DEDUPLICATION_ENABLED": "true",
        "MAGNETAR_SUPERUSER_ROLES": '["admin", "ops"]',
        "MAGNETAR_BROADCAST_MAX_LAG_SECONDS": "2.5",
        "PATH": "/usr/bin",  # not ours: left alone
    }
    config, sources = BrokerConfig.load_with_sources(path, environ, port=7200)
    assert config.port == 7200 and sources["port"] == "command line"
    assert (
        config.fsync_policy == "never"
        and sources["fsync_policy"] == "environment variable MAGNETAR_FSYNC_POLICY"
    )
    assert config.host == "127.0.0.2" and sources["host"] == f"file {path}"
    assert config.deduplication_enabled is True and config.superuser_roles == ["admin", "ops"]
    assert config.broadcast_max_lag_seconds == 2.5
    assert sources["max_message_size"] == "default"
    assert BrokerConfig.load(path).port == 7000  # no environment unless one is given


@pytest.mark.parametrize(
    ("variable", "text", "message"),
    [
        ("MAGNETAR_PORTT", "1", "unknown setting 'portt'"),
        ("MAGNETAR_DEDUPLICATION_ENABLED", "maybe", "must be true or false"),
        ("MAGNETAR_PORT", "66x", "must be a number"),
        ("MAGNETAR_MAX_MESSAGE_SIZE", "-5", "max_message_size = -5 .* must be greater than 0"),  # range
    ],
)
def test_a_wrong_environment_variable_is_refused_naming_it(variable, text, message):
    with pytest.raises(ValueError, match=message):
        BrokerConfig.load(None, {variable: text})


def test_config_show_prints_each_setting_with_its_source_and_fails_on_a_bad_one(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("port = 7001\n")
    env = {**os.environ, "MAGNETAR_FSYNC_POLICY": "never"}
    shown = subprocess.run(
        [sys.executable, "-m", "magnetar", "config", "show", "--config", str(path), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    settings = json.loads(shown.stdout)
    assert settings["port"] == {"value": 7001, "source": f"file {path}"}
    assert settings["fsync_policy"] == {
        "value": "never",
        "source": "environment variable MAGNETAR_FSYNC_POLICY",
    }
    assert settings["host"]["source"] == "default"
    env["MAGNETAR_DEDUPLICATION_ENABLED"] = "nope"
    failed = subprocess.run(
        [sys.executable, "-m", "magnetar", "config", "show"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert failed.returncode == 1
    assert "deduplication_enabled" in failed.stderr and "MAGNETAR_DEDUPLICATION_ENABLED" in failed.stderr


def test_the_broker_refuses_to_start_on_a_wrong_setting_and_names_it(tmp_path):
    env = {**os.environ, "MAGNETAR_PORT": "six-six-five-zero"}
    command = [sys.executable, "-m", "magnetar", "standalone", "--data-dir", str(tmp_path / "d")]
    started = subprocess.run([*command, "--port", "0"], capture_output=True, text=True, env=env, timeout=60)
    assert started.returncode == 1
    assert "cannot start" in started.stderr and "MAGNETAR_PORT" in started.stderr
    assert not (tmp_path / "d").exists()  # nothing was set up


def test_storage_defaults_and_ranges_are_the_storage_layers():
    from magnetar.broker.config import STORAGE_SETTINGS
    from magnetar.storage.config import StorageConfig

    assert BrokerConfig().storage_config() == StorageConfig(data_dir=Path("./data"))
    assert set(STORAGE_SETTINGS) <= {f.name for f in dataclasses.fields(StorageConfig)}
    with pytest.raises(ValueError, match="max_ledger_size_bytes"):
        StorageConfig(data_dir=Path("d"), max_ledger_size_bytes=0)
    with pytest.raises(ValueError, match=r"max_ledger_size_bytes = 0 .* must be greater than 0"):
        BrokerConfig.load(None, max_ledger_size_bytes=0)


def test_the_model_refuses_a_wrong_type_made_in_python_too():
    with pytest.raises(ValueError, match="port"):
        BrokerConfig(port="6650")
    assert BrokerConfig(data_dir="relative/dir").data_dir == Path("relative/dir")  # text is a path


def test_zero_turns_keepalive_off_and_is_taken(tmp_path):
    path = tmp_path / "m.toml"
    path.write_text("keepalive_interval_seconds = 0\n")  # the smart-city job's broker.toml has it
    assert BrokerConfig.load(path).keepalive_interval_seconds == 0.0
    path.write_text("keepalive_interval_seconds = -1\n")
    with pytest.raises(ValueError, match=r"keepalive_interval_seconds = -1 .* greater than or equal to 0"):
        BrokerConfig.load(path)


def test_workers_is_a_count_or_auto_one_per_usable_core():
    assert BrokerConfig().workers == 1 and BrokerConfig().worker_count() == 1
    assert BrokerConfig.load(None, {"MAGNETAR_WORKERS": "3"}).worker_count() == 3
    auto = BrokerConfig.load(None, {"MAGNETAR_WORKERS": "auto"})
    assert auto.workers == "auto" and auto.worker_count() == len(os.sched_getaffinity(0))
    for refused in ({"MAGNETAR_WORKERS": "many"}, {"MAGNETAR_WORKERS": "0"}):
        with pytest.raises(ValueError, match="setting workers"):
            BrokerConfig.load(None, refused)


def test_the_supervisors_listening_line_is_read_as_a_brokers():
    addresses = "pulsar://127.0.0.1:6650 and http://127.0.0.1:8080"
    line = f"Magnetar 0.1 listening on {addresses}, data in d (2 workers)"
    assert parse_listening(line) == parse_listening(line.removesuffix(" (2 workers)"))
