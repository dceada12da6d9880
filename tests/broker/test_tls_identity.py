"""The role a client certificate names (Pulsar's AuthenticationProviderTls), from the subject as
``ssl.SSLSocket.getpeercert()`` gives it."""

from __future__ import annotations

import ssl

import trustme

from magnetar.broker.tls_identity import role_from_certificate


def subject(*rdns: tuple[tuple[str, str], ...]) -> dict:
    return {"subject": rdns}


def test_the_common_name_is_the_role():
    cert = subject(
        (("countryName", "GB"),),
        (("organizationName", "Isode Limited"),),
        (("commonName", "Steve Kille"),),
    )
    assert role_from_certificate(cert) == "Steve Kille"


def test_the_first_common_name_as_rfc_2253_writes_it_wins():
    # RFC 2253 writes the subject's parts last first: CN=vehicle-7,OU=fleet,CN=city.
    cert = subject(
        (("commonName", "city"),), (("organizationalUnitName", "fleet"),), (("commonName", "vehicle-7"),)
    )
    assert role_from_certificate(cert) == "vehicle-7"
    # An empty CN is passed over, as Pulsar does.
    assert role_from_certificate(subject((("commonName", "city"),), (("commonName", ""),))) == "city"


def test_no_certificate_or_no_common_name_names_nobody():
    assert role_from_certificate(None) is None
    assert role_from_certificate({}) is None  # what getpeercert() gives for an unverified peer
    assert role_from_certificate(subject((("organizationName", "no cn"),))) is None
    assert role_from_certificate({"subject": ()}) is None


def test_a_real_certificate(tmp_path):
    ca = trustme.CA()
    leaf = ca.issue_cert("vehicle-7.clients.example", common_name="vehicle-7", organization_name="city")
    path = tmp_path / "leaf.pem"
    leaf.cert_chain_pems[0].write_to_path(str(path))
    decoded = ssl._ssl._test_decode_cert(str(path))  # the dict getpeercert() returns, from a file
    assert role_from_certificate(decoded) == "vehicle-7"
