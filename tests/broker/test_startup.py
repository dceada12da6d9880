"""Start-up (broker/startup.py): the settings checked together once, and what the checks build
handed to the broker as built."""

from __future__ import annotations

import base64

import pytest

from magnetar.broker import startup
from magnetar.broker.config import BrokerConfig
from magnetar.broker.entry_metadata import BrokerTimestampInterceptor, IndexInterceptor
from magnetar.broker.resources import BrokerNotStarted
from magnetar.broker.service import BrokerService
from magnetar.security import tokens


def test_each_key_file_is_read_once_and_the_broker_gets_what_start_up_built(tmp_path, monkeypatch):
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(tokens.create_secret_key())
    reads = []
    load_secret_key = tokens.load_secret_key

    def counting(value: str) -> bytes:
        reads.append(value)
        return load_secret_key(value)

    monkeypatch.setattr(tokens, "load_secret_key", counting)
    setup = startup.load(
        None, data_dir=tmp_path / "data", authentication_enabled=True, token_secret_key=f"file://{key_file}"
    )
    service = BrokerService(setup)
    assert reads == [f"file://{key_file}"]
    assert service.authentication is setup.authentication is not None
    assert setup.interceptors == (BrokerTimestampInterceptor, IndexInterceptor)


def test_the_settings_model_imports_nothing_it_would_check():
    """BrokerConfig.load checks types, ranges and its own cross-setting rule; the key is not read."""
    config = BrokerConfig.load(None, authentication_enabled=True, token_secret_key="file:///no/such/key")
    with pytest.raises(ValueError, match="token authentication"):
        startup.prepare(config)


def test_the_order_of_the_start_up_checks():
    """TLS first, then authentication, then authorization, then the interceptors: as before."""
    secret = "data:;base64," + base64.b64encode(tokens.create_secret_key()).decode()
    with pytest.raises(ValueError, match="needs token_secret_key"):
        startup.prepare(
            BrokerConfig(authentication_enabled=True, broker_entry_metadata_interceptors=["nope"])
        )
    with pytest.raises(ValueError, match="interceptor"):
        startup.prepare(
            BrokerConfig(
                authentication_enabled=True,
                token_secret_key=secret,
                broker_entry_metadata_interceptors=["nope"],
            )
        )


def test_resources_before_start_are_refused_by_name(tmp_path):
    service = BrokerService(startup.prepare(BrokerConfig(data_dir=tmp_path / "data")))
    for resource in (
        "storage",
        "namespaces",
        "clusters",
        "topic_replication",
        "schemas",
        "catalog",
        "loader",
    ):
        with pytest.raises(BrokerNotStarted, match="not started"):
            getattr(service, resource)
