"""The connector against a broker with token authentication and TLS on: pulsar-spark's
``pulsar.client.*`` options (and the ``token`` shorthand) reach every connection it opens
(the planner's, the read tasks', the writer's, and the admin calls over HTTPS); without a token
the query fails with a clear error naming the options."""

from __future__ import annotations

import base64
import pickle
from dataclasses import dataclass
from pathlib import Path

import pytest

from magnetar.client import Client
from magnetar.client.admin import AdminClient
from magnetar.client.authentication import AuthenticationToken
from magnetar.security import tokens
from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.options import ReadOptions, WriteOptions
from magnetar.spark.security import PARAMS, PLUGIN, token_supplier
from tests.interop.tls_certs import TlsFiles, make_tls_files, tls_settings
from tests.spark.support import produce

TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@dataclass(frozen=True)
class Secured:
    broker: object
    files: TlsFiles
    token: str
    token_file: Path

    def options(self, **more: str) -> dict[str, str]:
        return {
            "service_url": self.broker.service_url_tls,
            "admin_url": self.broker.https_url,
            "pulsar.client.tlsTrustCertsFilePath": str(self.files.ca),
            "pulsar.client.tlsHostnameVerificationEnable": "true",
            **more,
        }


@pytest.fixture(scope="module")
def secured(broker_factory_session, tmp_path_factory) -> Secured:
    key = tokens.create_secret_key()
    directory = tmp_path_factory.mktemp("secured")
    files = make_tls_files(directory / "tls")
    broker = broker_factory_session(
        {
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
            "authentication_providers": ["token", "tls"],
            **tls_settings(files),
        }
    )
    token = tokens.create_token(key, "spark-job", 600)
    token_file = directory / "spark.token"
    token_file.write_text(token + "\n")
    return Secured(broker, files, token, token_file)


def test_write_then_read_with_a_token_over_tls(spark, secured, topic):
    rows = [(f"k{i}", f"v{i}") for i in range(6)]
    df = spark.createDataFrame(rows, "key string, value string")
    write_options = secured.options(topic=topic, enableDeduplication="true")
    write_options |= {PLUGIN: TOKEN_PLUGIN, PARAMS: secured.token_file.as_uri()}  # Pulsar's file: form
    df.write.format("magnetar").mode("append").options(**write_options).save()

    read = spark.read.format("magnetar").options(**secured.options(topic=topic, token=secured.token)).load()
    got = read.orderBy("offset").collect()

    assert sorted((r.key, r.value) for r in got) == [(k, v.encode()) for k, v in rows]  # two write tasks
    assert [r.offset for r in got] == list(range(6))


def test_mutual_tls_plugin_reads_with_the_client_certificate(spark, secured, topic):
    with Client(
        secured.broker.service_url_tls,
        authentication=AuthenticationToken(secured.token),
        tls_trust_certs_file_path=str(secured.files.ca),
    ) as client:
        produce(client, topic, ["x", "y"])
    params = f"tlsCertFile:{secured.files.client_cert},tlsKeyFile:{secured.files.client_key}"
    options = secured.options(topic=topic)
    options |= {PLUGIN: "org.apache.pulsar.client.impl.auth.AuthenticationTls", PARAMS: params}

    rows = spark.read.format("magnetar").options(**options).load().orderBy("offset").collect()

    assert [r.value for r in rows] == [b"x", b"y"]


def test_without_a_token_the_query_fails_naming_the_options(spark, secured, topic):
    read = spark.read.format("magnetar").options(**secured.options(topic=topic)).load
    with pytest.raises(Exception, match=r"HTTP 401.*pulsar\.client\.authParams"):
        read().collect()

    df = spark.createDataFrame([("k", "v")], "key string, value string")
    writer = df.write.format("magnetar").mode("append").options(**secured.options(topic=topic))
    with pytest.raises(Exception, match=r"HTTP 401.*pulsar\.client\.authParams"):
        writer.save()

    wrong = tokens.create_token(tokens.create_secret_key(), "spark-job", 600)  # signed with another key
    with pytest.raises(Exception, match=r"HTTP 401"):
        spark.read.format("magnetar").options(**secured.options(topic=topic, token=wrong)).load().collect()


# -- the options alone (no network) -------------------------------------------------------------------
def test_auth_params_read_as_pulsars_authentication_token(tmp_path):
    path = tmp_path / "t.jwt"
    path.write_text("  from-file \n")
    assert token_supplier("token:abc")() == "abc"
    assert token_supplier(path.as_uri())() == "from-file"
    assert token_supplier('{"token": "from-json"}')() == "from-json"
    assert token_supplier("raw.jwt.text")() == "raw.jwt.text"
    path.write_text("rotated")
    assert token_supplier(path.as_uri())() == "rotated"  # read again each time, as Pulsar's supplier


def test_security_options_travel_to_tasks_and_stay_out_of_repr():
    opts = ReadOptions.parse(
        {
            "topic": "a",
            "service_url": "pulsar+ssl://h:6651",
            PLUGIN: TOKEN_PLUGIN,
            PARAMS: "token:s.jwt",
        },
        streaming=False,
    )
    assert opts.admin_url == "https://h:8443"  # a TLS broker's admin API is HTTPS (webServicePortTls)
    assert opts.security.token() == "s.jwt"
    assert "s.jwt" not in repr(opts)
    assert pickle.loads(pickle.dumps(opts.security)) == opts.security
    assert WriteOptions.parse({"token": "t"}).security.token() == "t"
    assert ReadOptions.parse({"topic": "a"}, streaming=False).security.authentication() is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({PLUGIN: "com.example.Kerberos", PARAMS: "x"}, "not supported"),
        ({PLUGIN: TOKEN_PLUGIN}, "authParams is empty"),
        ({PARAMS: "token:x"}, "authPluginClassName is not"),
        ({"token": "x", PLUGIN: TOKEN_PLUGIN, PARAMS: "token:y"}, "not both"),
        (
            {PLUGIN: "org.apache.pulsar.client.impl.auth.AuthenticationTls", PARAMS: "tlsCertFile:/c"},
            "tlsKeyFile",
        ),
        ({"pulsar.client.tlsAllowInsecureConnection": "maybe"}, "true or false"),
    ],
)
def test_bad_security_options_are_named(options, message):
    with pytest.raises(InvalidOptionError, match=message):
        WriteOptions.parse(options)


def test_a_role_granted_consume_reads_and_one_without_is_refused(spark, broker_factory_session, topic):
    key = tokens.create_secret_key()
    broker = broker_factory_session(
        {
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
            "authorization_enabled": True,
            "superuser_roles": ["admin"],
        }
    )
    admin = AdminClient(broker.http_url, token=tokens.create_token(key, "admin", 600))
    admin.grant_permission(topic, "reader", ["consume"])
    with Client(broker.service_url, authentication=AuthenticationToken(admin.token)) as client:
        produce(client, topic, ["a", "b", "c"])

    def read(role: str):
        options = {"service_url": broker.service_url, "admin_url": broker.http_url, "topic": topic}
        options["token"] = tokens.create_token(key, role, 600)
        return spark.read.format("magnetar").options(**options).load().orderBy("offset").collect()

    assert [r.value for r in read("reader")] == [b"a", b"b", b"c"]
    with pytest.raises(Exception, match=r"HTTP 403.*not allow the connector's role"):
        read("stranger")
