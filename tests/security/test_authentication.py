"""The broker's provider set (broker/authentication.py) from settings, without a network."""

from __future__ import annotations

import base64

import pytest

from magnetar.broker import startup
from magnetar.broker.authentication import (
    PROVIDERS,
    Authentication,
    AuthenticationFailed,
    AuthenticationProvider,
    register,
)
from magnetar.broker.config import BrokerConfig
from magnetar.security import tokens


def config(**values) -> BrokerConfig:
    return BrokerConfig(**values)


def secret_url(key: bytes) -> str:
    return "data:;base64," + base64.b64encode(key).decode()


def test_off_by_default():
    assert BrokerConfig().authentication_enabled is False
    assert Authentication.from_config(config()) is None


@pytest.mark.parametrize(
    "values, message",
    [
        ({}, "needs token_secret_key or token_public_key"),
        ({"authentication_providers": []}, "authentication_providers is empty"),
        ({"authentication_providers": ["nope"]}, "unknown authentication provider"),
        ({"token_secret_key": "data:;base64,AA==", "token_public_key": "data:;base64,AA=="}, "not both"),
        ({"token_public_key": "data:;base64,AAAA"}, "not a public key"),
    ],
)
def test_unusable_settings_refuse_to_start(values, message):
    with pytest.raises(ValueError, match=message):
        startup.prepare(config(authentication_enabled=True, **values))


def test_token_provider_roles_and_refusals():
    key = tokens.create_secret_key()
    auth = Authentication.from_config(config(authentication_enabled=True, token_secret_key=secret_url(key)))
    role, provider = auth.authenticate("token", tokens.create_token(key, "alice", 60).encode())
    assert role == "alice" and provider.expires_at(tokens.create_token(key, "a", 60).encode()) is not None
    with pytest.raises(AuthenticationFailed, match="not enabled"):
        auth.authenticate("tls", b"")
    with pytest.raises(AuthenticationFailed, match="expired"):
        auth.authenticate("token", tokens.create_token(key, "a", -1).encode())
    assert auth.authenticate_http("Bearer " + tokens.create_token(key, "web")) == "web"
    for header in (None, "", "Basic abc", "Bearer ", "Bearer x.y.z"):
        with pytest.raises(AuthenticationFailed):
            auth.authenticate_http(header)


def test_another_provider_plugs_in():
    class Fixed(AuthenticationProvider):
        auth_method = "fixed"

        def authenticate(self, auth_data, peer_certificate=None):
            if auth_data != b"open sesame":
                raise AuthenticationFailed("wrong word")
            return "cave"

    register("fixed", lambda cfg: Fixed())
    try:
        auth = Authentication.from_config(
            config(authentication_enabled=True, authentication_providers=["fixed"])
        )
        assert auth.authenticate("fixed", b"open sesame")[0] == "cave"
        with pytest.raises(AuthenticationFailed):
            auth.authenticate("token", b"x")
    finally:
        del PROVIDERS["fixed"]
