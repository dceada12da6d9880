"""The Grafana dashboard (docs/grafana/magnetar.json, docs/metrics.md) against what a real broker
serves: every metric its panels' and variables' expressions name is in the broker's ``/metrics``
after traffic of every kind the dashboard shows (topics, compaction, tiered storage,
geo-replication to a second broker, a broadcast subscription), with the labels the expressions
select on."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from magnetar.security import tokens
from tests.interop.support import admin_call
from tests.waiting import eventually

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "magnetar.json"
ROWS = ["Overview", "Topic", "Storage", "Replication", "Broadcast"]

#: PromQL's words that are not metrics (functions, aggregations, keywords).
_NOT_METRICS = frozenset(
    (
        *("sum", "min", "max", "avg", "count", "rate", "irate", "increase", "delta", "vector", "abs"),
        *("by", "without", "on", "ignoring", "group_left", "group_right", "or", "and", "unless", "bool"),
        *("offset", "topk", "bottomk", "label_values", "histogram_quantile", "clamp_min"),
    )
)
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)")
_SELECTOR = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)\s*(\{[^}]*\})?")
_MATCHER_LABEL = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)")
_LABEL_VALUES = re.compile(r"^label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$")


def selectors(expr: str) -> list[tuple[str, list[str]]]:
    """The metrics an expression selects, each with the label names its matcher names."""
    if (values := _LABEL_VALUES.match(expr.strip())) is not None:
        expr = values.group(1)
    expr = _GROUPING.sub(" ", _RANGE.sub("", expr))
    found = []
    for match in _SELECTOR.finditer(expr):
        name, matcher = match.groups()
        rest = expr[match.end() :].lstrip()
        if name in _NOT_METRICS or (matcher is None and rest.startswith("(")):
            continue
        found.append((name, _MATCHER_LABEL.findall(matcher or "")))
    return found


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def expressions(board: dict) -> list[str]:
    found = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    found += [var["query"]["query"] for var in board["templating"]["list"] if var["type"] == "query"]
    return found


def test_the_expression_reader_finds_metrics_and_their_labels():
    assert selectors('sum by (topic) (rate(pulsar_in_messages_total{cluster=~"$c", topic!="x"}[1m]))') == [
        ("pulsar_in_messages_total", ["cluster", "topic"])
    ]
    assert selectors("count(magnetar_storage_writable == 0) or vector(0)") == [
        ("magnetar_storage_writable", [])
    ]
    assert selectors('label_values(pulsar_rate_in{cluster=~"$cluster"}, namespace)') == [
        ("pulsar_rate_in", ["cluster"])
    ]


def test_the_dashboard_has_pulsars_layout_and_sound_panels():
    board = dashboard()
    assert [p["title"] for p in board["panels"] if p["type"] == "row"] == ROWS
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"
    assert all(selectors(expr) for expr in expressions(board))


def scrape(broker) -> dict[str, set[str]]:
    """Every sample name of the broker's /metrics, with the label names its samples carry."""
    with urllib.request.urlopen(f"{broker.http_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    labels: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    return labels


def traffic(edge, client) -> None:
    """On ``edge``: sends, a plain and a broadcast subscription, a compaction, a send refused (a
    terminated topic) and replication to ``central`` running."""
    topic = "persistent://public/default/dashboard-traffic"
    producer = client.create_producer(topic)
    plain = client.subscribe(topic, "plain")
    broadcast = client.subscribe(topic, "fleet", properties={"magnetar.subscription.type": "Broadcast"})
    for i in range(10):
        producer.send(b"reading %d" % i, partition_key=f"sensor-{i % 3}")
    for consumer in (plain, broadcast):
        for _ in range(10):
            consumer.acknowledge(consumer.receive(10_000))
    path = "/admin/v2/persistent/public/default/dashboard-traffic/compaction"
    assert admin_call(edge, "PUT", path)[0] == 204
    eventually(lambda: admin_call(edge, "GET", path)[1]["status"] == "SUCCESS", what="the compaction")
    stats = "/admin/v2/persistent/public/default/dashboard-traffic/stats"
    eventually(lambda: admin_call(edge, "GET", stats)[1]["replication"], what="replication to central")
    ended = client.create_producer("persistent://public/default/dashboard-ended")
    assert admin_call(edge, "POST", "/admin/v2/persistent/public/default/dashboard-ended/terminate")[0] == 200
    with pytest.raises(pulsar.PulsarException):
        ended.send(b"too late")


def refusals(guarded, token_of) -> None:
    """On a broker with authentication and authorization: a bad token and a forbidden call."""
    assert call_with(guarded, "/admin/v2/tenants", "not-a-token") == 401
    assert call_with(guarded, "/admin/v2/tenants", token_of("nobody")) == 403


def call_with(broker, path: str, token: str) -> int:
    request = urllib.request.Request(broker.http_url + path, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.interop
@pytest.mark.slow
def test_every_metric_the_dashboard_names_is_served(clusters, broker_factory, client_factory, tmp_path):
    tier = (tmp_path / "tier").as_uri()
    edge, _ = clusters.start(
        "edge", "central", config={"managed_ledger_offload_driver": "filesystem", "file_system_uri": tier}
    )
    clusters.link("edge", "central")
    clusters.replicate("edge", ["edge", "central"])
    traffic(edge, client_factory(edge.service_url))
    key = tokens.create_secret_key()
    guarded = broker_factory(
        {
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
            "authorization_enabled": True,
            "superuser_roles": ["root"],
            "authenticate_metrics_endpoint": False,
        }
    )
    refusals(guarded, lambda role: tokens.create_token(key, role, 600))

    served = scrape(edge)
    for name, labels in scrape(guarded).items():
        served.setdefault(name, set()).update(labels)
    missing: list[str] = []
    for expr in expressions(dashboard()):
        for name, matched in selectors(expr):
            if name not in served:
                missing.append(f"{name} (in {expr})")
            elif not_served := set(matched) - served[name]:
                missing.append(f"{name} has no label {sorted(not_served)} (in {expr})")
    assert not missing, "the dashboard names what the broker does not serve:\n" + "\n".join(missing)
