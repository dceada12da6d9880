"""Every offload policy path of a namespace and a topic (admin/offload_api.py, built by
admin/policy_routes.py), answered as Pulsar's admin API answers them: what is not set, what is set,
what is refused, and unsetting by each path that unsets. No offload runs here
(test_tiered_storage.py has them)."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from tests.interop.support import admin_call

pytestmark = pytest.mark.interop

NAMESPACE = "/admin/v2/namespaces/public/default"
LAG = {"managedLedgerOffloadDeletionLagInMillis": 60_000}


def _status(broker, method: str, path: str) -> int:
    """The HTTP status alone (an aiohttp 405 has a plain-text body)."""
    request = urllib.request.Request(broker.http_url + path, data=b"5", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_a_namespaces_offload_thresholds_and_deletion_lag(broker):
    for path in ("offloadThreshold", "offloadThresholdInSeconds"):
        assert admin_call(broker, "GET", f"{NAMESPACE}/{path}") == (200, -1)  # not set
        assert admin_call(broker, "PUT", f"{NAMESPACE}/{path}", 5) == (204, None)
        assert admin_call(broker, "GET", f"{NAMESPACE}/{path}") == (200, 5)
        refused = admin_call(broker, "PUT", f"{NAMESPACE}/{path}", -2)
        assert refused == (400, {"reason": f"{path} must be a whole number of at least -1"})
        assert _status(broker, "POST", f"{NAMESPACE}/{path}") == 405  # PUT only, as Pulsar's
        assert _status(broker, "DELETE", f"{NAMESPACE}/{path}") == 405
    lag = f"{NAMESPACE}/offloadDeletionLagMs"
    assert admin_call(broker, "GET", lag) == (200, None)  # not set
    assert admin_call(broker, "PUT", lag, 3_600_000) == (204, None)
    assert admin_call(broker, "GET", lag) == (200, 3_600_000)
    assert admin_call(broker, "PUT", lag, -1)[0] == 400
    assert admin_call(broker, "DELETE", lag) == (204, None)
    assert admin_call(broker, "GET", lag) == (200, None)
    assert admin_call(broker, "PUT", "/admin/v2/namespaces/public/nowhere/offloadDeletionLagMs", 1)[0] == 404


@pytest.mark.parametrize("remove", ["offloadPolicies", "removeOffloadPolicies"])
def test_a_namespaces_offload_policies(broker, remove):
    path = f"{NAMESPACE}/offloadPolicies"
    assert admin_call(broker, "GET", path) == (204, None)  # not set
    assert admin_call(broker, "POST", path, LAG) == (204, None)
    assert admin_call(broker, "GET", path) == (200, LAG)
    assert admin_call(broker, "PUT", path, {**LAG, "managedLedgerOffloadThresholdInBytes": 10}) == (204, None)
    assert admin_call(broker, "GET", path) == (200, {**LAG, "managedLedgerOffloadThresholdInBytes": 10})
    refused = admin_call(broker, "POST", path, {"nonsense": 1})
    assert refused == (400, {"reason": "unknown offload policy field(s): nonsense"})
    assert admin_call(broker, "DELETE", f"{NAMESPACE}/{remove}") == (204, None)
    assert admin_call(broker, "GET", path) == (204, None)


def test_a_topics_offload_policies_over_its_namespaces(broker, topic):
    path = "/admin/v2/" + topic.replace("://", "/") + "/offloadPolicies"
    assert admin_call(broker, "GET", path) == (204, None)  # its own: not set
    assert admin_call(broker, "POST", f"{NAMESPACE}/offloadPolicies", LAG) == (204, None)
    status, applied = admin_call(broker, "GET", path + "?applied=true")
    assert status == 200 and applied["managedLedgerOffloadDeletionLagInMillis"] == 60_000, applied
    assert admin_call(broker, "POST", path, {"managedLedgerOffloadDeletionLagInMillis": 5}) == (204, None)
    assert admin_call(broker, "GET", path) == (200, {"managedLedgerOffloadDeletionLagInMillis": 5})
    status, applied = admin_call(broker, "GET", path + "?applied=true")
    assert status == 200 and applied["managedLedgerOffloadDeletionLagInMillis"] == 5, applied
    assert admin_call(broker, "PUT", path, {"nonsense": 1})[0] == 400
    assert admin_call(broker, "DELETE", path) == (204, None)
    assert admin_call(broker, "GET", path) == (204, None)
    status, applied = admin_call(broker, "GET", path + "?applied=true")
    assert status == 200 and applied["managedLedgerOffloadDeletionLagInMillis"] == 60_000, applied
    elsewhere = "/admin/v2/persistent/public/nowhere/t/offloadPolicies"
    assert admin_call(broker, "POST", elsewhere, LAG)[0] == 404
