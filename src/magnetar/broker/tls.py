"""The broker's TLS: one ``ssl.SSLContext`` from the config, shared by the pulsar+ssl, HTTPS and
MQTT-over-TLS ports.

Which client certificates are asked for follows Pulsar's settings:
``tls_require_trusted_client_cert_on_connect`` makes a certificate signed by a CA in
``tls_trust_certs_file_path`` a condition of the handshake; without it a client may present one
(it is then checked against the same CAs, and its subject is what the ``tls`` authentication
provider reads) or none. ``tls_allow_insecure_connection`` asks for none at all.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig

#: Pulsar's ``tlsProtocols`` names (the JDK's) that OpenSSL still allows, oldest first.
PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
#: A client that opens a TCP connection and never finishes its handshake is dropped after this
#: (Netty's SslHandler, under Pulsar's broker, waits 10 s too).
HANDSHAKE_TIMEOUT_S = 10.0


class TlsConfigError(ValueError):
    """The TLS settings cannot be served: named files missing or unreadable, a key that does not
    match its certificate, contradictory settings. The broker does not start."""


#: The settings that each open a TLS port.
TLS_PORTS = ("broker_service_port_tls", "web_service_port_tls", "mqtts_port")


def tls_enabled(config: BrokerConfig) -> bool:
    return any(getattr(config, name) is not None for name in TLS_PORTS)


def check_settings(config: BrokerConfig) -> None:
    """The checks that need no files: called from ``BrokerConfig.validate``."""
    for name in ("broker_service_port_tls", "web_service_port_tls"):
        port = getattr(config, name)
        if port is not None and not 0 <= port <= 65535:
            raise TlsConfigError(f"{name} must be a port number (0 picks a free one), not {port}")
    if not config.broker_service_port_enabled and config.broker_service_port_tls is None:
        raise TlsConfigError(
            "broker_service_port_enabled is false and broker_service_port_tls is not set: "
            "the broker would serve the binary protocol on no port (set broker_service_port_tls "
            "to serve pulsar+ssl:// only)"
        )
    if not config.web_service_port_enabled and config.web_service_port_tls is None:
        raise TlsConfigError(
            "web_service_port_enabled is false and web_service_port_tls is not set: "
            "the broker would serve the admin API and /metrics on no port (set web_service_port_tls "
            "to serve HTTPS only)"
        )
    if not tls_enabled(config):
        return
    missing = [n for n in ("tls_certificate_file_path", "tls_key_file_path") if not getattr(config, n)]
    if missing:
        raise TlsConfigError(
            "a TLS port is set (broker_service_port_tls, web_service_port_tls or mqtts_port) but "
            f"{' and '.join(missing)} is not: the broker needs its certificate and private key to serve TLS"
        )
    if config.tls_require_trusted_client_cert_on_connect:
        if not config.tls_trust_certs_file_path:
            raise TlsConfigError(
                "tls_require_trusted_client_cert_on_connect needs tls_trust_certs_file_path: "
                "the CA certificates that client certificates must be signed by"
            )
        if config.tls_allow_insecure_connection:
            raise TlsConfigError(
                "tls_require_trusted_client_cert_on_connect and tls_allow_insecure_connection contradict "
                "each other: a trusted client certificate is required, or none is checked"
            )
    unknown = [p for p in config.tls_protocols if p not in PROTOCOLS]
    if unknown:
        raise TlsConfigError(f"tls_protocols: unsupported {unknown}; supported: {sorted(PROTOCOLS)}")


def _readable(setting: str, path: str) -> Path:
    file = Path(path)
    if not file.is_file():
        raise TlsConfigError(f"{setting}: no such file {path!r}")
    return file


def server_context(config: BrokerConfig) -> ssl.SSLContext:
    """The server context for both TLS ports; ``TlsConfigError`` says what is wrong with the files."""
    check_settings(config)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert = _readable("tls_certificate_file_path", config.tls_certificate_file_path or "")
    key = _readable("tls_key_file_path", config.tls_key_file_path or "")
    try:
        ctx.load_cert_chain(cert, key)
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"cannot use certificate {str(cert)!r} with key {str(key)!r} (PEM files, the key matching "
            f"the certificate, unencrypted): {exc}"
        ) from None
    except OSError as exc:  # ssl's own error names neither file
        raise TlsConfigError(
            f"cannot read certificate {str(cert)!r} or key {str(key)!r}: {exc.strerror or exc}"
        ) from None
    if config.tls_trust_certs_file_path and not config.tls_allow_insecure_connection:
        trust = _readable("tls_trust_certs_file_path", config.tls_trust_certs_file_path)
        try:
            ctx.load_verify_locations(cafile=trust)
        except ssl.SSLError as exc:
            message = f"tls_trust_certs_file_path {str(trust)!r}: not PEM certificates: {exc}"
            raise TlsConfigError(message) from None
        except OSError as exc:
            message = f"tls_trust_certs_file_path {str(trust)!r}: cannot read it: {exc.strerror or exc}"
            raise TlsConfigError(message) from None
        required = config.tls_require_trusted_client_cert_on_connect
        ctx.verify_mode = ssl.CERT_REQUIRED if required else ssl.CERT_OPTIONAL
    else:
        ctx.verify_mode = ssl.CERT_NONE
    if config.tls_protocols:
        versions = sorted(PROTOCOLS[p] for p in config.tls_protocols)
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    if config.tls_ciphers:
        try:
            ctx.set_ciphers(":".join(config.tls_ciphers))
        except ssl.SSLError as exc:
            message = f"tls_ciphers {config.tls_ciphers}: no cipher OpenSSL knows: {exc}"
            raise TlsConfigError(message) from None
    return ctx
