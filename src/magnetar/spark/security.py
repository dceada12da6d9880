"""Credentials and TLS for every connection the connector opens (planner, read tasks, writer).

Options carry pulsar-spark's names: client settings pass with the ``pulsar.client.`` prefix
(``authPluginClassName``, ``authParams``, ``tlsTrustCertsFilePath``, ``tlsAllowInsecureConnection``,
``tlsHostnameVerificationEnable``), and ``token`` is a shorthand for a token plugin. The parsed
``ConnectionSecurity`` holds only strings and flags, so it travels pickled to executors, which
build their own client and admin connection from it.

``authParams`` of the token plugin read as Pulsar's ``AuthenticationToken.configure`` reads them:
``token:<jwt>``, ``file:///path`` (read again at each CONNECT, so a rotated file is picked up),
a JSON object ``{"token": "<jwt>"}``, or else the whole string is the token.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from magnetar.client import Client
from magnetar.client.authentication import Authentication, AuthenticationToken
from magnetar.client.tls import AuthenticationTLS
from magnetar.spark.errors import InvalidOptionError

TOKEN_PLUGINS = frozenset({"org.apache.pulsar.client.impl.auth.authenticationtoken", "token"})
TLS_PLUGINS = frozenset({"org.apache.pulsar.client.impl.auth.authenticationtls", "tls"})

PLUGIN = "pulsar.client.authPluginClassName"
PARAMS = "pulsar.client.authParams"
TRUST = "pulsar.client.tlsTrustCertsFilePath"
INSECURE = "pulsar.client.tlsAllowInsecureConnection"
HOSTNAME = "pulsar.client.tlsHostnameVerificationEnable"


@dataclass(frozen=True)
class ConnectionSecurity:
    """How to authenticate and what TLS to trust; all defaults: a plain, anonymous connection."""

    auth_kind: str | None = None  # "token" or "tls"
    auth_params: str = field(default="", repr=False)  # holds the token: kept out of logs
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool = False
    tls_hostname_verification: bool = False  # Pulsar's tlsHostnameVerificationEnable default

    def authentication(self) -> Authentication | None:
        if self.auth_kind == "token":
            return AuthenticationToken(token_supplier(self.auth_params))
        if self.auth_kind == "tls":
            cert, key = tls_params(self.auth_params)
            return AuthenticationTLS(cert, key)
        return None

    def token(self) -> str | None:
        """The token for the admin API's ``Authorization: Bearer`` header (None: no token auth)."""
        if self.auth_kind != "token":
            return None
        return token_supplier(self.auth_params)()

    def client(self, service_url: str) -> Client:
        """A client for ``service_url`` (``pulsar+ssl://`` for TLS) with these credentials."""
        cert = key = None
        if self.auth_kind == "tls":
            cert, key = tls_params(self.auth_params)
        return Client(
            service_url,
            operation_timeout_seconds=30,
            authentication=self.authentication(),
            tls_trust_certs_file_path=self.tls_trust_certs_file_path,
            tls_allow_insecure_connection=self.tls_allow_insecure_connection,
            tls_validate_hostname=self.tls_hostname_verification,
            tls_certificate_file_path=cert,
            tls_private_key_file_path=key,
        )

    def admin_kwargs(self) -> dict:
        """Keyword arguments of ``AdminClient`` for an ``https://`` admin URL."""
        kwargs: dict = {
            "tls_trust_certs_file_path": self.tls_trust_certs_file_path,
            "tls_validate_hostname": self.tls_hostname_verification,
            "tls_allow_insecure_connection": self.tls_allow_insecure_connection,
        }
        if self.auth_kind == "token":
            kwargs["token"] = self.token
        elif self.auth_kind == "tls":
            kwargs["tls_certificate_file_path"], kwargs["tls_key_file_path"] = tls_params(self.auth_params)
        return kwargs


def token_supplier(params: str):  # -> Callable[[], str]
    """Pulsar's ``AuthenticationToken.configure``: token:, file:, JSON {"token": ...}, or the token."""
    if params.startswith("token:"):
        token = params[len("token:") :]
        return lambda: token
    if params.startswith("file:"):
        path = urllib.request.url2pathname(urllib.parse.urlsplit(params).path)

        def from_file() -> str:
            try:
                with open(path, encoding="utf-8") as f:
                    return f.read().strip()
            except OSError as exc:
                raise InvalidOptionError(f"option {PARAMS}: cannot read the token file: {exc}") from None

        return from_file
    try:
        parsed = json.loads(params)
    except ValueError:
        parsed = None
    is_json = isinstance(parsed, dict) and isinstance(parsed.get("token"), str)
    token = parsed["token"] if is_json else params
    return lambda: token


def tls_params(params: str) -> tuple[str, str]:
    """Pulsar's ``AuthenticationTls`` params: ``tlsCertFile:/path,tlsKeyFile:/path`` or that as JSON."""
    try:
        parsed = json.loads(params)
    except ValueError:
        parsed = dict(p.split(":", 1) for p in params.split(",") if ":" in p)
    if not isinstance(parsed, dict):
        parsed = {}
    cert, key = parsed.get("tlsCertFile"), parsed.get("tlsKeyFile")
    if not cert or not key:
        raise InvalidOptionError(
            f"option {PARAMS} of the TLS plugin must name tlsCertFile and tlsKeyFile "
            '("tlsCertFile:/path/cert.pem,tlsKeyFile:/path/key.pem")'
        )
    return str(cert), str(key)


def option_flag(options: dict[str, str], name: str, default: bool) -> bool:
    """A true/false option (``true``/``false``, ``1``/``0``, ``yes``/``no``) from lower-cased options."""
    raw = options.get(name.lower())
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InvalidOptionError(f"option {name} must be true or false, not {raw!r}")


def parse_security(options: dict[str, str]) -> ConnectionSecurity:
    """From lower-cased options; a plugin we do not know, or params with no plugin, is an error."""
    plugin = (options.get(PLUGIN.lower()) or "").strip()
    params = options.get(PARAMS.lower())
    token = options.get("token")
    kind: str | None = None
    if token is not None:
        if plugin:
            raise InvalidOptionError(f"give either the option token or {PLUGIN}, not both")
        kind, params = "token", "token:" + token.strip()
    elif plugin:
        if plugin.lower() in TOKEN_PLUGINS:
            kind = "token"
        elif plugin.lower() in TLS_PLUGINS:
            kind = "tls"
        else:
            raise InvalidOptionError(
                f"option {PLUGIN}: {plugin!r} is not supported; use "
                "org.apache.pulsar.client.impl.auth.AuthenticationToken or "
                "org.apache.pulsar.client.impl.auth.AuthenticationTls"
            )
        if not params:
            raise InvalidOptionError(f"option {PLUGIN} is set but {PARAMS} is empty")
        if kind == "tls":
            tls_params(params)
    elif params:
        raise InvalidOptionError(f"option {PARAMS} is set but {PLUGIN} is not (which plugin reads them?)")
    return ConnectionSecurity(
        auth_kind=kind,
        auth_params=params or "",
        tls_trust_certs_file_path=options.get(TRUST.lower()) or None,
        tls_allow_insecure_connection=option_flag(options, INSECURE, False),
        tls_hostname_verification=option_flag(options, HOSTNAME, False),
    )
