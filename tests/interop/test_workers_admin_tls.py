"""The admin API with a client certificate as the only credentials, on two workers: a request
about a topic that the other worker owns is proxied there with the certificate sealed, and the
owner checks the certificate's role itself; a client cannot name a certificate it does not
hold by writing the sealed header itself."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest

from magnetar.admin.owner_calls import RELAYED_CERTIFICATE
from magnetar.security import tokens
from tests.interop.test_websocket import TIMEOUT_S
from tests.interop.test_websocket_security import client_context, grant, lookup, secured, two_owners
from tests.interop.test_workers import WORKERS
from tests.interop.tls_certs import CLIENT_ROLE

pytestmark = [pytest.mark.interop, pytest.mark.slow]


def stats(https_url: str, topic: str, context: ssl.SSLContext, headers: dict[str, str] | None = None) -> dict:
    path = topic.replace("://", "/", 1)
    request = urllib.request.Request(f"{https_url}/admin/v2/{path}/stats", headers=headers or {})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
        return json.loads(answer.read())


def create(https_url: str, topic: str, token: str, ca: str) -> None:
    path = topic.replace("://", "/", 1)
    request = urllib.request.Request(
        f"{https_url}/admin/v2/{path}", method="PUT", headers={"Authorization": f"Bearer {token}"}
    )
    urllib.request.urlopen(request, timeout=TIMEOUT_S, context=ssl.create_default_context(cafile=ca)).read()


def test_a_certificate_only_admin_request_is_served_by_the_owning_worker(broker_factory, tls_files):
    settings, key = secured(tls_files, **WORKERS)
    broker = broker_factory(settings)
    admin_token = tokens.create_token(key, "admin", 600)
    ca = str(tls_files.ca)
    grant(broker.https_url, admin_token, CLIENT_ROLE, ["produce", "consume"], ca)
    first, second = two_owners(broker, admin_token)
    for topic in (first, second):
        create(broker.https_url, topic, admin_token, ca)
    # Each topic asked at the other worker's own HTTPS port: proxied, whichever way round.
    at_first_owner = lookup(broker, first, admin_token)["httpUrlTls"]
    at_second_owner = lookup(broker, second, admin_token)["httpUrlTls"]
    assert at_first_owner != at_second_owner
    with_certificate = client_context(tls_files)
    for port_of_other, topic in ((at_second_owner, first), (at_first_owner, second)):
        found = stats(port_of_other, topic, with_certificate)
        assert "subscriptions" in found, found
    # No certificate: no role, at either port.
    without = client_context(tls_files, certificate=False)
    with pytest.raises(urllib.error.HTTPError) as refused:
        stats(at_second_owner, first, without)
    assert refused.value.code == 401
    # A client writing the sealed header itself is refused before anything is proxied.
    body = json.dumps({"method": "tls", "data": "", "certificate": {"subject": []}, "at": 0})
    forged = json.dumps({"body": body, "mac": "00"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        stats(at_second_owner, first, without, headers={RELAYED_CERTIFICATE: forged})
    assert refused.value.code == 401
    assert "not sealed with this broker's secret" in json.loads(refused.value.read())["reason"]
