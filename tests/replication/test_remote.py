"""How a replicator reaches a remote cluster from its ClusterData (Pulsar's field names): the
service URLs, TLS files and authentication of its client and admin client. No network."""

from __future__ import annotations

import json

import pytest

from magnetar.client.authentication import AuthenticationToken
from magnetar.client.tls import AuthenticationTLS
from magnetar.replication.remote import (
    RemoteConfigError,
    admin_options,
    client_options,
    tls_files_of,
    token_of,
)

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
TLS_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationTls"
PLAIN = {"serviceUrl": "http://centre:8080", "brokerServiceUrl": "pulsar://centre:6650"}
TLS = {
    **PLAIN,
    "serviceUrlTls": "https://centre:8443",
    "brokerServiceUrlTls": "pulsar+ssl://centre:6651",
    "brokerClientTlsEnabled": True,
    "brokerClientTrustCertsFilePath": "/certs/ca.pem",
}


def test_token_parameters_in_each_form(tmp_path):
    token_file = tmp_path / "token.jwt"
    token_file.write_text("jwt-from-file\n")
    assert token_of("token:abc.def.ghi") == "abc.def.ghi"
    assert token_of(f"file://{token_file}") == "jwt-from-file"
    assert token_of(f"file:{token_file}") == "jwt-from-file"
    assert token_of(json.dumps({"token": "jwt-in-json"})) == "jwt-in-json"
    assert token_of("  bare-jwt ") == "bare-jwt"


def test_tls_parameters_in_each_form():
    assert tls_files_of("tlsCertFile:/c/client.pem,tlsKeyFile:/c/client.key") == (
        "/c/client.pem",
        "/c/client.key",
    )
    assert tls_files_of(json.dumps({"tlsCertFile": "/a.pem", "tlsKeyFile": "/a.key"})) == ("/a.pem", "/a.key")
    with pytest.raises(RemoteConfigError):
        tls_files_of("tlsCertFile:/c/client.pem")


def test_plain_cluster():
    assert client_options(PLAIN) == ("pulsar://centre:6650", {})
    assert admin_options(PLAIN) == ("http://centre:8080", {})


def test_tls_urls_with_trust_certs():
    url, options = client_options({**TLS, "tlsAllowInsecureConnection": True})
    assert url == "pulsar+ssl://centre:6651"
    assert options == {"tls_trust_certs_file_path": "/certs/ca.pem", "tls_allow_insecure_connection": True}
    url, options = admin_options(TLS)
    assert url == "https://centre:8443"
    assert options == {"tls_trust_certs_file_path": "/certs/ca.pem", "tls_allow_insecure_connection": False}


def test_tls_urls_unused_unless_the_client_tls_is_enabled():
    data = {**TLS, "brokerClientTlsEnabled": False}
    assert client_options(data) == ("pulsar://centre:6650", {})
    assert admin_options(data) == ("http://centre:8080", {})


def test_only_tls_urls_given():
    data = {"serviceUrlTls": "https://centre:8443", "brokerServiceUrlTls": "pulsar+ssl://centre:6651"}
    with pytest.raises(RemoteConfigError, match="brokerServiceUrl"):
        client_options(data)  # brokerClientTlsEnabled is off: there is no plain URL to use
    assert admin_options(data)[0] == "https://centre:8443"


@pytest.mark.parametrize("plugin", [TOKEN_PLUGIN, "token"])
def test_token_plugin(plugin):
    data = {**PLAIN, "authenticationPlugin": plugin, "authenticationParameters": "token:secret-jwt"}
    _, options = client_options(data)
    assert isinstance(options["authentication"], AuthenticationToken)
    assert options["authentication"].auth_data() == b"secret-jwt"
    assert admin_options(data) == ("http://centre:8080", {"token": "secret-jwt"})


def test_tls_plugin():
    data = {
        **TLS,
        "authenticationPlugin": TLS_PLUGIN,
        "authenticationParameters": "tlsCertFile:/c/client.pem,tlsKeyFile:/c/client.key",
    }
    _, options = client_options(data)
    auth = options["authentication"]
    assert isinstance(auth, AuthenticationTLS)
    assert (auth.certificate_path, auth.private_key_path) == ("/c/client.pem", "/c/client.key")
    _, admin = admin_options(data)
    assert (admin["tls_certificate_file_path"], admin["tls_key_file_path"]) == (
        "/c/client.pem",
        "/c/client.key",
    )


def test_unknown_plugin_refused():
    data = {**PLAIN, "authenticationPlugin": "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2"}
    with pytest.raises(RemoteConfigError, match="not supported"):
        client_options(data)


@pytest.mark.parametrize("data", [{}, {"serviceUrl": "http://centre:8080"}, {"brokerServiceUrl": ""}])
def test_no_broker_service_url_refused(data):
    with pytest.raises(RemoteConfigError, match="brokerServiceUrl"):
        client_options(data)


def test_no_admin_url():
    assert admin_options({"brokerServiceUrl": "pulsar://centre:6650"}) == (None, {})
