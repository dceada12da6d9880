"""The web console's own paths (admin/console_api.py) against a real broker: its page served
without credentials and its data only with them, the session's rights by role, the broker at a
glance after traffic from the official client, a namespace's topics paged and searched on the
broker, and the console switched off."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

import pytest

from magnetar.security import tokens
from tests.console.many_topics import write_partitioned_topics
from tests.waiting import eventually


def call(broker, method: str, path: str, token: str | None = None, body=None) -> tuple[int, object, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.http_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
            kind = response.headers.get("Content-Type", "")
            return response.status, json.loads(text) if "json" in kind else text, dict(response.headers)
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        return exc.code, json.loads(text) if text.startswith("{") else text, dict(exc.headers)


@pytest.fixture
def secured(broker_factory):
    key = tokens.create_secret_key()
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
            "authorization_enabled": True,
            "superuser_roles": ["root"],
        }
    )
    return broker, lambda role: tokens.create_token(key, role, 600)


@pytest.mark.interop
def test_the_page_is_open_and_its_data_needs_a_token(secured):
    broker, token_of = secured
    status, page, headers = call(broker, "GET", "/console/")
    assert status == 200 and "<title>Magnetar console</title>" in page
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    assert call(broker, "GET", "/console/console.js")[0] == 200
    assert call(broker, "GET", "/console/../pyproject.toml")[0] == 404
    assert call(broker, "GET", "/admin/v2/console/overview")[0] == 401
    assert call(broker, "GET", "/admin/v2/console/session", "not-a-token")[0] == 401

    status, root, _ = call(broker, "GET", "/admin/v2/console/session", token_of("root"))
    assert status == 200
    assert (root["role"], root["superuser"], root["adminTenants"]) == ("root", True, ["public"])

    # a tenant admin administers its tenant; a role with a grant only reads
    root_token = token_of("root")
    assert call(broker, "PUT", "/admin/v2/tenants/city", root_token, {"adminRoles": ["city-ops"]})[0] == 204
    assert call(broker, "PUT", "/admin/v2/namespaces/city/alerts", root_token)[0] == 204
    grant = "/admin/v2/namespaces/city/alerts/permissions/viewer"
    assert call(broker, "POST", grant, root_token, ["consume"])[0] == 204
    ops = call(broker, "GET", "/admin/v2/console/session", token_of("city-ops"))[1]
    assert (ops["superuser"], ops["adminTenants"]) == (False, ["city"])
    viewer = call(broker, "GET", "/admin/v2/console/session", token_of("viewer"))[1]
    assert (viewer["superuser"], viewer["adminTenants"]) == (False, [])
    # what each may list: the viewer its granted namespace only, not public's
    seen = call(broker, "GET", "/admin/v2/console/namespaces", token_of("viewer"))[1]
    assert seen == [{"tenant": "city", "namespaces": ["city/alerts"]}]
    assert call(broker, "GET", "/admin/v2/console/topics/city/alerts", token_of("viewer"))[0] == 200
    assert call(broker, "GET", "/admin/v2/console/topics/public/default", token_of("viewer"))[0] == 403
    # the broker at a glance: as /metrics, any authenticated role
    assert call(broker, "GET", "/admin/v2/console/overview", token_of("viewer"))[0] == 200


@pytest.mark.interop
def test_the_overview_and_topic_rows_follow_the_traffic(broker, client_factory, topic):
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "console-sub")
    for i in range(20):
        producer.send(b"m%d" % i)

    def overview():
        answer = call(broker, "GET", "/admin/v2/console/overview")[1]
        assert answer["msgInCounter"] >= 20, answer
        return answer

    seen = eventually(overview, what="the overview counting 20 messages in")
    assert seen["connections"] >= 1 and seen["producers"] == 1 and seen["consumers"] == 1
    assert seen["workers"][0]["pid"] > 0 and seen["uptimeSeconds"] >= 0
    storage = seen["storage"]
    assert storage["writable"] and storage["usedBytes"] > 0 and storage["freeBytes"] > 0
    assert storage["dataDir"] == str(broker.data_dir)

    local = topic.rsplit("/", 1)[1]
    page = call(broker, "GET", f"/admin/v2/console/topics/public/default?search={local}")[1]
    assert page["total"] == 1
    (row,) = page["topics"]
    assert (row["name"], row["loaded"], row["producers"], row["consumers"]) == (topic, True, 1, 1)
    assert row["msgInCounter"] == 20 and row["backlog"] == 20
    consumer.close()
    producer.close()


@pytest.mark.interop
@pytest.mark.slow
def test_a_namespace_of_many_topics_is_paged_and_searched_on_the_broker(broker):
    # Partitioned topics' metadata, written while the broker is stopped (tests/console/many_topics.py).
    broker.stop()
    write_partitioned_topics(
        broker.data_dir, [f"persistent://public/default/device-{i:05d}" for i in range(10_000)]
    )
    broker.start()
    status, first, _ = call(broker, "GET", "/admin/v2/console/topics/public/default?limit=100")
    assert status == 200
    assert (first["total"], len(first["topics"]), first["topics"][0]["localName"]) == (
        10_000,
        100,
        "device-00000",
    )
    assert first["topics"][0]["partitions"] == 1 and not first["topics"][0]["loaded"]
    second = call(broker, "GET", first["next"])[1]
    assert second["offset"] == 100 and second["topics"][0]["localName"] == "device-00100"
    query = urllib.parse.urlencode({"search": "DEVICE-0149", "limit": 5})
    found = call(broker, "GET", f"/admin/v2/console/topics/public/default?{query}")[1]
    assert found["total"] == 10
    assert [t["localName"] for t in found["topics"]] == [f"device-0149{i}" for i in range(5)]
    rest = call(broker, "GET", found["next"])[1]
    assert [t["localName"] for t in rest["topics"]] == [f"device-0149{i}" for i in range(5, 10)]
    assert rest["next"] is None
    assert call(broker, "GET", "/admin/v2/console/topics/public/default?offset=-1")[0] == 400
    assert call(broker, "GET", "/admin/v2/console/topics/public/default?limit=x")[0] == 400
    assert call(broker, "GET", "/admin/v2/console/topics/public/nowhere")[0] == 404


@pytest.mark.interop
@pytest.mark.slow
def test_the_console_can_be_switched_off(broker_factory):
    broker = broker_factory({"web_console_enabled": False})
    assert call(broker, "GET", "/console/")[0] == 404
    assert call(broker, "GET", "/admin/v2/console/overview")[0] == 404
    assert call(broker, "GET", "/admin/v2/tenants")[0] == 200  # the admin API itself is served


@pytest.mark.interop
@pytest.mark.slow
def test_with_workers_the_overview_and_topic_rows_hold_every_workers_part(broker_factory, client_factory):
    broker = broker_factory({"workers": 2})
    client = client_factory(broker.service_url)
    topic = "persistent://public/default/spread"
    assert call(broker, "PUT", "/admin/v2/persistent/public/default/spread/partitions", body=4)[0] == 204
    producer = client.create_producer(topic)
    for i in range(40):
        producer.send(b"m%d" % i)

    def every_worker_counted():
        answer = call(broker, "GET", "/admin/v2/console/overview")[1]
        assert sorted(w["worker"] for w in answer["workers"]) == ["worker-0", "worker-1"], answer
        assert answer["msgInCounter"] == 40, answer
        return answer

    overview = eventually(every_worker_counted, what="both workers' parts, 40 messages in")
    assert overview["missingWorkers"] == [] and overview["producers"] == sum(
        w["producers"] for w in overview["workers"]
    )
    page = call(broker, "GET", "/admin/v2/console/topics/public/default?search=spread")[1]
    (row,) = page["topics"]
    assert (row["partitions"], row["loadedPartitions"], row["msgInCounter"]) == (4, 4, 40)
    producer.close()
