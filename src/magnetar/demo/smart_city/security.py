"""``--secure``: what the job needs to run its broker as a city would deploy it.

At run time, into the job's work directory: a CA and a server certificate for 127.0.0.1 /
localhost (``cryptography``), an HS256 secret key and tokens (``magnetar.security.tokens``):
one for the pipeline's role, a superuser (the job's own admin calls, the simulator, Spark,
the control room), and one per vehicle, each its own role. The broker serves pulsar+ssl://
and HTTPS, authenticates tokens and authorizes: a vehicle may consume only the alerts topic
of its area, granted through Pulsar's admin v2 topic permission path. Nothing made here is
kept once the work directory is removed.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from magnetar.client.admin import AdminClient
from magnetar.client.authentication import AuthenticationToken
from magnetar.security import tokens

PIPELINE_ROLE = "smart-city-pipeline"
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TOKEN_LIFETIME_S = 24 * 3600


class ClientOptions(TypedDict, total=False):
    """Our client's keyword arguments for a role over TLS (``SecureCity.client_options``)."""

    authentication: AuthenticationToken
    tls_trust_certs_file_path: str
    tls_validate_hostname: bool


def vehicle_role(vehicle_id: str) -> str:
    """A vehicle's role (its token's ``sub``) is its id, e.g. ``vehicle-0001``."""
    return vehicle_id


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path


def _write_private(path: Path, data: bytes) -> None:
    """A key or token only its owner may read."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certificates(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A CA valid for a day and a server certificate it signed, naming ``hosts``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Magnetar smart-city CA")])
    ca_cert = _ca_certificate(ca_key, ca_name)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _server_certificate(server_key.public_key(), hosts, ca_key, ca_name)
    files = TlsFiles(directory / "ca.cert.pem", directory / "broker.cert.pem", directory / "broker.key.pem")
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(
        files.key,
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    return files


def _valid_for_a_day(builder: x509.CertificateBuilder) -> x509.CertificateBuilder:
    """From five minutes ago (clocks differ a little) to a day from now."""
    now = datetime.datetime.now(datetime.UTC)
    return builder.not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(
        now + datetime.timedelta(days=1)
    )


def _ca_certificate(ca_key: ec.EllipticCurvePrivateKey, ca_name: x509.Name) -> x509.Certificate:
    """The self-signed CA: it signs certificates, nothing else."""
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=True,
        crl_sign=True,
        encipher_only=False,
        decipher_only=False,
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
    )
    return _valid_for_a_day(builder).sign(ca_key, hashes.SHA256())


def _server_certificate(
    server_key: ec.EllipticCurvePublicKey,
    hosts: tuple[str, ...],
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
) -> x509.Certificate:
    """The broker's certificate, naming ``hosts`` (IP addresses as such), signed by the CA."""
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[-1])]))
        .issuer_name(ca_name)
        .public_key(server_key)
        .serial_number(x509.random_serial_number())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    return _valid_for_a_day(builder).sign(ca_key, hashes.SHA256())


@dataclass
class SecureCity:
    """The secured run's files and credentials (made by ``create``)."""

    directory: Path
    tls: TlsFiles
    secret_key_file: Path
    pipeline_token: str
    pipeline_token_file: Path
    vehicle_tokens: dict[str, str] = field(default_factory=dict)  # vehicle id -> token

    @classmethod
    def create(cls, directory: Path, vehicle_ids: list[str]) -> SecureCity:
        directory.mkdir(parents=True, exist_ok=True)
        tls = make_certificates(directory / "tls")
        key = tokens.create_secret_key()
        key_file = directory / "token-secret.key"
        _write_private(key_file, key)  # raw bytes, as `magnetar tokens create-secret-key` writes it
        pipeline = tokens.create_token(key, PIPELINE_ROLE, TOKEN_LIFETIME_S)
        token_file = directory / "pipeline.token"
        _write_private(token_file, pipeline.encode())
        vehicles = {v: tokens.create_token(key, vehicle_role(v), TOKEN_LIFETIME_S) for v in vehicle_ids}
        return cls(directory, tls, key_file, pipeline, token_file, vehicles)

    def broker_settings(self) -> dict[str, object]:
        """TLS ports only (the plain ones off), token authentication and authorization, with the
        pipeline as superuser."""
        return {
            "broker_service_port_enabled": False,
            "web_service_port_enabled": False,
            "broker_service_port_tls": 0,
            "web_service_port_tls": 0,
            "tls_certificate_file_path": str(self.tls.cert),
            "tls_key_file_path": str(self.tls.key),
            "authentication_enabled": True,
            "authentication_providers": ["token"],
            "token_secret_key": self.secret_key_file.as_uri(),
            "authorization_enabled": True,
            "superuser_roles": [PIPELINE_ROLE],
        }

    def client_options(self, token: str) -> ClientOptions:
        """Keyword arguments of our client for a role's token over TLS, the hostname checked."""
        return {
            "authentication": AuthenticationToken(token),
            "tls_trust_certs_file_path": str(self.tls.ca),
            "tls_validate_hostname": True,
        }

    def spark_options(self) -> dict[str, str]:
        """The Spark connector's options (pulsar-spark's names); the token is read from its file."""
        return {
            "pulsar.client.authPluginClassName": TOKEN_PLUGIN,
            "pulsar.client.authParams": self.pipeline_token_file.as_uri(),
            "pulsar.client.tlsTrustCertsFilePath": str(self.tls.ca),
            "pulsar.client.tlsHostnameVerificationEnable": "true",
        }


class Admin(AdminClient):
    """The job's admin client: plain, or (secured) over HTTPS with the pipeline's token, the
    broker's certificate checked against the job's CA."""

    def __init__(self, admin_url: str, secure: SecureCity | None = None) -> None:
        if secure is None:
            super().__init__(admin_url)
        else:
            super().__init__(
                admin_url, token=secure.pipeline_token, tls_trust_certs_file_path=str(secure.tls.ca)
            )
