"""``magnetar admin topics lookup | bundle-range`` and ``namespaces bundles | unload |
split-bundle`` run as a user runs them, against a real broker."""

from __future__ import annotations

import json

import pytest

from .conftest import admin_ok as ok

pytestmark = pytest.mark.interop


def test_lookup_bundle_range_bundles_unload_and_split(broker, topic):
    assert ok(broker, "topics", "lookup", topic).strip() == broker.service_url
    assert json.loads(ok(broker, "topics", "lookup", topic, "--json"))["httpUrl"] == broker.http_url
    bundle = ok(broker, "topics", "bundle-range", topic).strip()
    data = json.loads(ok(broker, "namespaces", "bundles", "public/default"))
    assert data["numBundles"] == 4 and bundle.split("_")[0] in data["boundaries"]
    ok(broker, "namespaces", "unload", "public/default", "--bundle", bundle)
    ok(broker, "namespaces", "split-bundle", "public/default", "--bundle", bundle)
    assert json.loads(ok(broker, "namespaces", "bundles", "public/default"))["numBundles"] == 5
    ok(broker, "namespaces", "create", "public/two", "--bundles", "2")
    assert json.loads(ok(broker, "namespaces", "bundles", "public/two"))["numBundles"] == 2
