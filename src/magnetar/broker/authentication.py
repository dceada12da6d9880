"""Authentication providers (Pulsar's ``AuthenticationProvider``s) and the set a broker runs.

A provider is named by its ``auth_method`` (what a client's CONNECT carries in
``auth_method_name``: ``token``, ``tls`` ...) and turns a client's credentials into a role.
``PROVIDERS`` maps the names in ``authentication_providers`` to factories, so another provider
(TLS) plugs in by registering itself; ``Authentication`` is what the broker and the admin API use.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from magnetar.broker.tls_identity import AUTH_METHOD_NAME as TLS_METHOD
from magnetar.broker.tls_identity import NO_ROLE, role_from_certificate

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.security import tokens

log = logging.getLogger(__name__)


class AuthenticationFailed(Exception):
    """Credentials refused; the message says why (sent to the client as AuthenticationError)."""


class AuthenticationProvider:
    """One way of proving who a client is."""

    #: The ``auth_method_name`` clients send for this provider.
    auth_method: str = ""

    def authenticate(self, auth_data: bytes, peer_certificate: Any | None = None) -> str:
        """The role these credentials prove; raises ``AuthenticationFailed``."""
        raise NotImplementedError

    def expires_at(self, auth_data: bytes) -> float | None:
        """When credentials that ``authenticate`` accepted stop being valid (Unix time), None
        if never: the broker challenges a connection for fresh ones then (AUTH_CHALLENGE)."""
        return None

    def worker_of(self, auth_data: bytes) -> str | None:
        """The worker of this broker these credentials are, when they are a worker's own sealed
        identity (``worker_credentials.py``): such a connection is served only what workers ask
        of each other (``handlers/worker_access.py``). None for a client's credentials."""
        return None


class TokenProvider(AuthenticationProvider):
    """Pulsar's ``AuthenticationProviderToken``: a JWT signed with ``token_secret_key`` (HS*) or
    the private key of ``token_public_key`` (RS*/ES*, per ``token_public_alg``)."""

    auth_method = "token"

    def __init__(self, key: Any, algorithms: list[str], role_claim: str) -> None:
        self._key = key
        self._algorithms = algorithms
        self._role_claim = role_claim

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TokenProvider:
        if config.token_secret_key and config.token_public_key:
            raise ValueError("set token_secret_key or token_public_key, not both")
        from magnetar.security import tokens  # jwt and cryptography: only where tokens are used

        try:
            if config.token_secret_key:
                return cls(
                    tokens.load_secret_key(config.token_secret_key),
                    list(tokens.SECRET_ALGORITHMS),
                    config.token_auth_claim,
                )
            if config.token_public_key:
                key = tokens.load_public_key(config.token_public_key)
                algorithms = tokens.algorithms_for_public_key(key, config.token_public_alg)
                return cls(key, algorithms, config.token_auth_claim)
        except tokens.KeyConfigError as exc:
            raise ValueError(f"token authentication: {exc}") from None
        raise ValueError(
            "the token authentication provider needs token_secret_key or token_public_key "
            "(make one with: magnetar tokens create-secret-key --output FILE)"
        )

    def _verify(self, auth_data: bytes) -> tokens.VerifiedToken:
        from magnetar.security import tokens

        try:
            return tokens.verify_token(auth_data, self._key, self._algorithms, self._role_claim)
        except tokens.InvalidToken as exc:
            raise AuthenticationFailed(f"Failed to authenticate token: {exc}") from None

    def authenticate(self, auth_data: bytes, peer_certificate: Any | None = None) -> str:
        return self._verify(auth_data).role

    def expires_at(self, auth_data: bytes) -> float | None:
        try:
            return self._verify(auth_data).expires_at
        except AuthenticationFailed:
            return 0.0


class TlsProvider(AuthenticationProvider):
    """Pulsar's ``AuthenticationProviderTls``: the role is the CN of the client certificate the
    TLS handshake verified against ``tls_trust_certs_file_path`` (``tls_identity.py``)."""

    auth_method = TLS_METHOD

    @classmethod
    def from_config(cls, config: BrokerConfig) -> TlsProvider:
        tls_ports = (config.broker_service_port_tls, config.web_service_port_tls, config.mqtts_port)
        if all(port is None for port in tls_ports):
            raise ValueError(
                "the tls authentication provider needs a TLS port "
                "(broker_service_port_tls, web_service_port_tls or mqtts_port)"
            )
        if not config.tls_trust_certs_file_path:
            raise ValueError(
                "the tls authentication provider needs tls_trust_certs_file_path "
                "(the CAs whose client certificates name roles)"
            )
        if config.tls_allow_insecure_connection:
            raise ValueError(
                "the tls authentication provider cannot work with tls_allow_insecure_connection "
                "(client certificates are then not asked for)"
            )
        return cls()

    def authenticate(self, auth_data: bytes, peer_certificate: Any | None = None) -> str:
        role = role_from_certificate(peer_certificate)
        if role is None:
            raise AuthenticationFailed(NO_ROLE)
        return role


#: Provider factories by the name used in ``authentication_providers``.
PROVIDERS: dict[str, Callable[[BrokerConfig], AuthenticationProvider]] = {
    "token": TokenProvider.from_config,
    "tls": TlsProvider.from_config,
}


def register(name: str, factory: Callable[[BrokerConfig], AuthenticationProvider]) -> None:
    PROVIDERS[name] = factory


class Authentication:
    """The providers a broker runs, by auth method name."""

    def __init__(self, providers: list[AuthenticationProvider]) -> None:
        self.providers = {p.auth_method: p for p in providers}

    @classmethod
    def from_config(cls, config: BrokerConfig) -> Authentication | None:
        """None when authentication is off; a ``ValueError`` for a setting that cannot work, so a
        broker asked to authenticate never starts open."""
        if not config.authentication_enabled:
            return None
        if not config.authentication_providers:
            raise ValueError("authentication_enabled is true but authentication_providers is empty")
        providers = []
        for name in config.authentication_providers:
            factory = PROVIDERS.get(name)
            if factory is None:
                raise ValueError(
                    f"unknown authentication provider {name!r} (known: {', '.join(sorted(PROVIDERS))})"
                )
            providers.append(factory(config))
        return cls(providers)

    def provider(self, auth_method: str) -> AuthenticationProvider:
        provider = self.providers.get(auth_method)
        if provider is None:
            raise AuthenticationFailed(
                f"authentication method {auth_method!r} is not enabled "
                f"(enabled: {', '.join(sorted(self.providers))})"
            )
        return provider

    def authenticate(
        self, auth_method: str, auth_data: bytes, peer_certificate: Any | None = None
    ) -> tuple[str, AuthenticationProvider]:
        provider = self.provider(auth_method)
        return provider.authenticate(auth_data, peer_certificate), provider

    def authenticate_http(self, authorization: str | None, peer_certificate: Any | None = None) -> str:
        """The role of an HTTP request from its ``Authorization`` header (``Bearer <token>``)."""
        if authorization:
            scheme, _, credentials = authorization.strip().partition(" ")
            if scheme.lower() == "bearer" and "token" in self.providers:
                return self.providers["token"].authenticate(credentials.strip().encode(), peer_certificate)
            raise AuthenticationFailed("the Authorization header is not 'Bearer <token>'")
        for provider in self.providers.values():  # a provider that needs no header (TLS)
            if peer_certificate is not None and provider.auth_method != "token":
                try:
                    return provider.authenticate(b"", peer_certificate)
                except AuthenticationFailed:
                    continue
        raise AuthenticationFailed("Authentication required")
