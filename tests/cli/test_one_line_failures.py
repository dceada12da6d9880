"""What a user gets wrong when starting ``magnetar standalone`` or writing keys is one line on
standard error and exit 1, never a traceback (docs/cli.md): a port in use, a data directory that
cannot be used, a key, certificate or settings file that cannot be read, a value of the wrong type,
an output that cannot be written."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from magnetar.broker_process import write_config
from magnetar.security import tokens

from .conftest import magnetar


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port this test listens on, so the broker finds it in use."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        yield taken.getsockname()[1]


def standalone(tmp_path: Path, *args: str, settings: dict[str, object] | None = None):
    """``magnetar standalone`` on free ports and a data directory of its own unless ``args`` say."""
    given = dict(zip(args[::2], args[1::2], strict=True))
    defaults = {"--port": "0", "--http-port": "0", "--data-dir": str(tmp_path / "data")}
    flags = [part for flag, value in (defaults | given).items() for part in (flag, value)]
    if settings is not None:
        flags += ["--config", str(write_config(tmp_path / "broker.toml", settings))]
    return magnetar("standalone", *flags)


def assert_cannot_start(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 1, no traceback, one ERROR line ``cannot start: ...`` holding ``words``; that line."""
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "listening on" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line or "Error" in line]
    assert len(errors) == 1, done.stderr
    line = errors[0]
    assert "cannot start: " in line, line
    for word in words:
        assert word in line, (word, line)
    return line


# -- ports ----------------------------------------------------------------------------------------------
def test_binary_port_in_use(tmp_path, taken_port):
    done = standalone(tmp_path, "--port", str(taken_port))
    assert_cannot_start(done, f"127.0.0.1:{taken_port}", "--port", "Address already in use")


def test_http_port_in_use(tmp_path, taken_port):
    done = standalone(tmp_path, "--http-port", str(taken_port))
    assert_cannot_start(done, f"127.0.0.1:{taken_port}", "--http-port", "Address already in use")


@pytest.mark.parametrize("setting", ["broker_service_port_tls", "web_service_port_tls"])
def test_tls_port_in_use(tmp_path, taken_port, tls_files, setting):
    settings = {
        "tls_certificate_file_path": str(tls_files.server_cert),
        "tls_key_file_path": str(tls_files.server_key),
        "broker_service_port_tls": 0,
        setting: taken_port,
    }
    done = standalone(tmp_path, settings=settings)
    assert_cannot_start(done, f"127.0.0.1:{taken_port}", setting, "Address already in use")


# -- the data directory ---------------------------------------------------------------------------------
def test_data_directory_that_is_a_file(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory")
    done = standalone(tmp_path, "--data-dir", str(a_file))
    assert_cannot_start(done, f"data directory {a_file}", "not a directory")


def test_data_directory_that_cannot_be_made(tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory")
    done = standalone(tmp_path, "--data-dir", str(a_file / "data"))
    assert_cannot_start(done, f"data directory {a_file / 'data'}", "Not a directory")


def test_data_directory_without_permission(tmp_path):
    if os.geteuid() == 0:  # root writes anywhere a mode allows nothing: sysfs refuses even root
        data_dir = Path("/sys/magnetar-test-data")
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        data_dir = locked / "data"
    done = standalone(tmp_path, "--data-dir", str(data_dir))
    assert_cannot_start(
        done, f"data directory {data_dir}", "not permitted" if os.geteuid() == 0 else "denied"
    )


# -- files and settings ---------------------------------------------------------------------------------
def test_missing_token_key_file(tmp_path):
    settings = {"authentication_enabled": True, "token_secret_key": f"file://{tmp_path}/missing.key"}
    done = standalone(tmp_path, settings=settings)
    assert_cannot_start(done, "missing.key", "No such file or directory")


def test_token_public_key_file_that_is_no_key(tmp_path):
    garbage = tmp_path / "public.key"
    garbage.write_bytes(b"this is not a key")
    settings = {"authentication_enabled": True, "token_public_key": f"file://{garbage}"}
    assert_cannot_start(standalone(tmp_path, settings=settings), "not a public key")


def test_missing_tls_certificate(tmp_path, tls_files):
    settings = {
        "broker_service_port_tls": 0,
        "tls_certificate_file_path": str(tmp_path / "missing.cert.pem"),
        "tls_key_file_path": str(tls_files.server_key),
    }
    assert_cannot_start(standalone(tmp_path, settings=settings), "tls_certificate_file_path", "missing.cert")


def test_tls_key_that_is_no_key(tmp_path, tls_files):
    garbage = tmp_path / "server.key.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnonsense\n-----END PRIVATE KEY-----\n")
    settings = {
        "broker_service_port_tls": 0,
        "tls_certificate_file_path": str(tls_files.server_cert),
        "tls_key_file_path": str(garbage),
    }
    assert_cannot_start(standalone(tmp_path, settings=settings), "cannot use certificate")


def test_settings_file_that_is_not_toml(tmp_path):
    bad = tmp_path / "broker.toml"
    bad.write_text("port = = 6650\n")
    done = magnetar("standalone", "--data-dir", str(tmp_path / "data"), "--config", str(bad))
    assert_cannot_start(done, f"settings file {bad} is not valid TOML", "line 1")


def test_missing_settings_file(tmp_path):
    missing = tmp_path / "nowhere.toml"
    done = magnetar("standalone", "--data-dir", str(tmp_path / "data"), "--config", str(missing))
    assert_cannot_start(done, f"cannot read the settings file {missing}", "No such file or directory")


def test_setting_of_the_wrong_type(tmp_path):
    done = standalone(tmp_path, settings={"max_message_size": "5 MB"})
    assert_cannot_start(done, "setting max_message_size = '5 MB'", "broker.toml")


# -- key writers ----------------------------------------------------------------------------------------
def test_a_key_written_into_missing_directories_makes_them(tmp_path):
    secret = tmp_path / "keys" / "new" / "secret.key"
    done = magnetar("tokens", "create-secret-key", "--output", str(secret))
    assert done.returncode == 0, done.stderr
    assert len(secret.read_bytes()) == 32 and secret.stat().st_mode & 0o777 == 0o600
    private, public = tmp_path / "pair" / "private.key", tmp_path / "pair" / "public" / "public.key"
    done = magnetar(
        "tokens", "create-key-pair", "--output-private-key", str(private), "--output-public-key", str(public)
    )
    assert done.returncode == 0, done.stderr
    key = tokens.load_public_key(str(public))
    token = tokens.create_token(tokens.load_private_key(str(private)), "made")
    assert tokens.verify_token(token, key, ["RS256"]).role == "made"


@pytest.mark.parametrize("command", ["create-secret-key", "create-key-pair"])
def test_a_key_that_cannot_be_written_is_one_line(tmp_path, command):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a directory")
    target = a_file / "secret.key"
    if command == "create-secret-key":
        done = magnetar("tokens", command, "--output", str(target))
    else:
        private = str(tmp_path / "private.key")
        done = magnetar(
            "tokens", command, "--output-private-key", private, "--output-public-key", str(target)
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip() == f"Error: cannot write {target}: {a_file} is not a directory"


def test_an_output_that_cannot_be_written_is_one_line():
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "magnetar", "tokens", "create-secret-key", "--base64"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.strip() == "Error: No space left on device"


def test_a_sys_exit_with_a_message_says_it_instead_of_exiting_1_silently(capsys):
    from magnetar.cli.main import exit_code

    assert exit_code(SystemExit("the reason")) == 1
    assert capsys.readouterr().err == "Error: the reason\n"
    assert (exit_code(SystemExit(None)), exit_code(SystemExit(0)), exit_code(SystemExit(3))) == (0, 0, 3)
    assert capsys.readouterr().err == ""
