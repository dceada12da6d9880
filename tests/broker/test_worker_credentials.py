"""Credentials one worker seals for an HTTP client at another's Pulsar port (broker/worker_credentials.py):
sealed and opened without a network, refused when forged, tampered with, old or sealed with another
secret, and checked by the owner's own providers (a token's role and expiry, a certificate's role)."""

from __future__ import annotations

import base64
import os
import stat
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from magnetar.broker.authentication import Authentication, AuthenticationFailed
from magnetar.broker.config import BrokerConfig
from magnetar.broker.worker_credentials import (
    AUTH_METHOD,
    MAX_AGE_S,
    SECRET_FILE,
    WORKER_ROLE_PREFIX,
    Relayed,
    WorkerSecret,
    identity,
    install,
)
from magnetar.security import tokens

CERTIFICATE = {"subject": [[["organizationName", "city"]], [["commonName", "camera-7"]]]}


@pytest.fixture
def key() -> bytes:
    return tokens.create_secret_key()


def authentication(key: bytes, tmp_path) -> Authentication:
    ca = tmp_path / "ca.pem"
    ca.write_text("not read by these tests")
    config = BrokerConfig(
        data_dir=tmp_path,
        authentication_enabled=True,
        authentication_providers=["token", "tls"],
        token_secret_key="data:;base64," + base64.b64encode(key).decode(),
        web_service_port_tls=0,
        tls_trust_certs_file_path=str(ca),
    )
    built = Authentication.from_config(config)
    assert built is not None
    return built


def test_a_seal_opens_with_the_same_secret_only(tmp_path):
    relayed = Relayed("token", b"a.b.c")
    sealed = WorkerSecret(tmp_path).seal(relayed)
    assert WorkerSecret(tmp_path).open(sealed) == relayed  # another worker reads the same file
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    with pytest.raises(AuthenticationFailed, match="not sealed with this broker's secret"):
        WorkerSecret(elsewhere).open(sealed)


def test_the_secret_file_is_the_owners_alone_and_one_for_workers_making_it_at_once(tmp_path):
    secrets = [WorkerSecret(tmp_path) for _ in range(8)]
    keys: list[bytes] = []
    threads = [threading.Thread(target=lambda s=s: keys.append(s.key)) for s in secrets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(keys)) == 1
    assert stat.S_IMODE(os.stat(tmp_path / SECRET_FILE).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [SECRET_FILE]  # no temporary file left


def test_a_tampered_or_old_seal_is_refused(tmp_path):
    secret = WorkerSecret(tmp_path)
    sealed = secret.seal(Relayed("tls", certificate=CERTIFICATE), now=1000.0)
    assert secret.open(sealed, now=1000.0 + MAX_AGE_S - 1).certificate == CERTIFICATE
    with pytest.raises(AuthenticationFailed, match="s old"):
        secret.open(sealed, now=1000.0 + MAX_AGE_S + 1)
    tampered = sealed.replace(b"camera-7", b"admin")
    with pytest.raises(AuthenticationFailed, match="not sealed"):
        secret.open(tampered, now=1000.0)


def test_the_owner_checks_a_sealed_token_itself(tmp_path, key):
    auth = authentication(key, tmp_path)
    secret = install(auth, tmp_path)
    provider = auth.provider(AUTH_METHOD)
    token = tokens.create_token(key, "vehicle-17", 600)
    sealed = secret.seal(Relayed("token", token.encode()))
    assert provider.authenticate(sealed) == "vehicle-17"
    expires = provider.expires_at(sealed)
    assert expires is not None and expires > 0
    forged = tokens.create_token(tokens.create_secret_key(), "admin", 600)
    with pytest.raises(AuthenticationFailed, match="token"):
        provider.authenticate(secret.seal(Relayed("token", forged.encode())))
    with pytest.raises(AuthenticationFailed, match="cannot seal worker credentials"):
        provider.authenticate(secret.seal(Relayed(AUTH_METHOD, sealed)))


def test_the_owner_takes_a_sealed_certificate_role(tmp_path, key):
    auth = authentication(key, tmp_path)
    secret = install(auth, tmp_path)
    provider = auth.provider(AUTH_METHOD)
    assert provider.authenticate(secret.seal(Relayed("tls", certificate=CERTIFICATE))) == "camera-7"
    with pytest.raises(AuthenticationFailed):
        provider.authenticate(secret.seal(Relayed("tls", certificate=None)))
    assert provider.expires_at(secret.seal(Relayed("tls", certificate=CERTIFICATE))) is None


def test_a_workers_own_identity_names_the_worker_and_only_when_sealed_as_one(tmp_path, key):
    auth = authentication(key, tmp_path)
    secret = install(auth, tmp_path)
    provider = auth.provider(AUTH_METHOD)
    sealed = secret.seal(identity("worker-1"))
    assert provider.authenticate(sealed) == f"{WORKER_ROLE_PREFIX}worker-1"
    assert provider.worker_of(sealed) == "worker-1"
    assert provider.expires_at(sealed) is None  # its seal's age is checked at CONNECT
    # A client's credentials are no worker, whatever their role is called; nor is a bad seal.
    token = tokens.create_token(key, "worker-1", 600)
    as_client = secret.seal(Relayed("token", token.encode()))
    assert provider.authenticate(as_client) == "worker-1"
    assert provider.worker_of(as_client) is None
    assert provider.worker_of(b"{}") is None
    assert auth.provider("token").worker_of(token.encode()) is None
    with pytest.raises(AuthenticationFailed, match="names no worker"):
        provider.authenticate(secret.seal(identity("")))
    with pytest.raises(AuthenticationFailed, match="not UTF-8"):
        provider.authenticate(secret.seal(Relayed("magnetar-worker-identity", b"\xff")))


def test_without_authentication_nothing_is_installed(tmp_path):
    assert install(None, tmp_path).key  # the secret alone


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_any_bytes_are_refused_with_authentication_failed_only(tmp_path_factory, data):
    secret = WorkerSecret(tmp_path_factory.mktemp("secret"))
    with pytest.raises(AuthenticationFailed):
        secret.open(data)
