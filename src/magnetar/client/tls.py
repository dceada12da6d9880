"""TLS for ``pulsar+ssl://`` service URLs, with the official client's options.

``tls_trust_certs_file_path``: the CA certificates (PEM) the broker's certificate must be signed by
(without it, the system's); ``tls_validate_hostname``: the certificate must also name the host of
the URL (off by default, as in the official client); ``tls_allow_insecure_connection``: accept any
certificate (no check at all). A client certificate for mutual TLS comes from
``authentication=AuthenticationTLS(certificate_path, private_key_path)`` or from
``tls_certificate_file_path`` / ``tls_private_key_file_path``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from magnetar.client.authentication import Authentication
from magnetar.client.errors import ConnectError, InvalidConfiguration


class TlsError(ConnectError):
    """The TLS handshake with the broker failed (its certificate is not trusted, does not name the
    host, has expired; or the broker refused ours). Not retried: another try fails the same way."""

    retriable = False


class AuthenticationTLS(Authentication):
    """Mutual TLS, as the official ``pulsar.AuthenticationTLS(certificate_path, private_key_path)``:
    the client presents this certificate in the handshake, and CONNECT names the method ``tls``
    (with no data: the broker reads the role from the certificate's CN)."""

    auth_method_name = "tls"

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        # For callers without type checks (the official client takes str paths only).
        if not isinstance(certificate_path, str) or not isinstance(private_key_path, str):  # type: ignore[redundant-expr]
            raise InvalidConfiguration("AuthenticationTLS takes the paths of a certificate and its key")
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    def auth_data(self) -> bytes:
        """What CONNECT carries as ``auth_data``: nothing, the certificate speaks for us."""
        return b""


@dataclass(frozen=True)
class TlsOptions:
    trust_certs_file_path: str | None = None
    validate_hostname: bool = False
    allow_insecure_connection: bool = False
    certificate_file_path: str | None = None
    private_key_file_path: str | None = None

    def context(self) -> ssl.SSLContext:
        """The client context; ``InvalidConfiguration`` names a file that is missing or unusable."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if self.allow_insecure_connection:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = self.validate_hostname
            ctx.verify_mode = ssl.CERT_REQUIRED
            if self.trust_certs_file_path:
                _check_file("tls_trust_certs_file_path", self.trust_certs_file_path)
                try:
                    ctx.load_verify_locations(cafile=self.trust_certs_file_path)
                except ssl.SSLError as exc:
                    path = self.trust_certs_file_path
                    message = f"tls_trust_certs_file_path {path!r}: not PEM certificates: {exc}"
                    raise InvalidConfiguration(message) from None
            else:
                ctx.load_default_certs()
        if self.certificate_file_path or self.private_key_file_path:
            cert = _check_file("tls_certificate_file_path", self.certificate_file_path)
            key = _check_file("tls_private_key_file_path", self.private_key_file_path)
            try:
                ctx.load_cert_chain(cert, key)
            except ssl.SSLError as exc:
                message = f"cannot use certificate {cert!r} with key {key!r}: {exc}"
                raise InvalidConfiguration(message) from None
        return ctx


def _check_file(option: str, path: str | None) -> str:
    if not path or not Path(path).is_file():
        raise InvalidConfiguration(f"{option}: no such file {path!r}")
    return path


def tls_options(
    authentication: object | None,
    tls_trust_certs_file_path: str | None = None,
    tls_validate_hostname: bool = False,
    tls_allow_insecure_connection: bool = False,
    tls_certificate_file_path: str | None = None,
    tls_private_key_file_path: str | None = None,
) -> TlsOptions:
    """The client's TLS options; an ``AuthenticationTLS`` names the client certificate (as in the
    official client, it wins over ``tls_certificate_file_path`` / ``tls_private_key_file_path``)."""
    if isinstance(authentication, AuthenticationTLS):
        tls_certificate_file_path = authentication.certificate_path
        tls_private_key_file_path = authentication.private_key_path
    return TlsOptions(
        tls_trust_certs_file_path,
        bool(tls_validate_hostname),
        bool(tls_allow_insecure_connection),
        tls_certificate_file_path,
        tls_private_key_file_path,
    )
