"""Certificates made at run time for the TLS tests (trustme): nothing secret is ever committed.

``make_tls_files`` (the ``tls_files`` fixture of conftest.py) writes into a directory a CA, a
server certificate naming 127.0.0.1 and localhost, one naming another host, an expired one, a
client certificate with ``CN=some-role``, and a second CA that signed none of them.
``tls_settings`` are the broker settings that serve both TLS ports with a server certificate.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

import trustme

CLIENT_ROLE = "some-role"


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    other_host_cert: Path
    other_host_key: Path
    expired_cert: Path
    expired_key: Path
    client_cert: Path
    client_key: Path
    wrong_ca: Path


def _write_leaf(cert: trustme.LeafCert, directory: Path, name: str) -> tuple[Path, Path]:
    chain = directory / f"{name}.cert.pem"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    key = directory / f"{name}.key.pem"
    cert.private_key_pem.write_to_path(str(key))
    return chain, key


def make_tls_files(directory: Path) -> TlsFiles:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA(organization_name="Magnetar test CA")
    ca_path = directory / "ca.cert.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    wrong_ca_path = directory / "wrong-ca.cert.pem"
    trustme.CA(organization_name="Someone else's CA").cert_pem.write_to_path(str(wrong_ca_path))
    now = datetime.datetime.now(datetime.UTC)
    server = _write_leaf(ca.issue_cert("127.0.0.1", "localhost"), directory, "server")
    other = _write_leaf(ca.issue_cert("broker.example.com"), directory, "other-host")
    expired = _write_leaf(
        ca.issue_cert(
            "127.0.0.1",
            "localhost",
            not_before=now - datetime.timedelta(days=30),
            not_after=now - datetime.timedelta(days=1),
        ),
        directory,
        "expired",
    )
    client = _write_leaf(
        ca.issue_cert(f"{CLIENT_ROLE}.clients.example", common_name=CLIENT_ROLE), directory, "client"
    )
    return TlsFiles(ca_path, *server, *other, *expired, *client, wrong_ca_path)


def tls_settings(files: TlsFiles, cert: Path | None = None, key: Path | None = None, **more: object) -> dict:
    """Broker settings serving pulsar+ssl:// and HTTPS on free ports with ``cert`` (the server's)."""
    return {
        "broker_service_port_tls": 0,
        "web_service_port_tls": 0,
        "tls_certificate_file_path": str(cert or files.server_cert),
        "tls_key_file_path": str(key or files.server_key),
        "tls_trust_certs_file_path": str(files.ca),
        **more,
    }
