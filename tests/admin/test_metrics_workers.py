"""Every worker's metrics in one scrape: each series with its worker's label, one family per name."""

from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from magnetar.admin.metrics_workers import WorkersCollector, labelled, parse

WORKER_0 = """# HELP pulsar_active_connections Client connections open now
# TYPE pulsar_active_connections gauge
pulsar_active_connections 2.0
# HELP pulsar_in_messages_total Messages producers sent to the topic
# TYPE pulsar_in_messages_total counter
pulsar_in_messages_total{topic="persistent://public/default/a"} 3.0
"""
WORKER_1 = """# HELP pulsar_in_messages_total Messages producers sent to the topic
# TYPE pulsar_in_messages_total counter
pulsar_in_messages_total{topic="persistent://public/default/b"} 4.0
# HELP pulsar_active_connections Client connections open now
# TYPE pulsar_active_connections gauge
pulsar_active_connections 5.0
"""


def test_each_sample_gets_its_workers_label_under_one_family_per_name():
    merged = labelled({"worker-0": parse(WORKER_0), "worker-1": parse(WORKER_1)})
    assert [(f.name, f.type) for f in merged] == [
        ("pulsar_active_connections", "gauge"),
        ("pulsar_in_messages", "counter"),
    ]
    assert [(s.labels, s.value) for s in merged[0].samples] == [
        ({"worker": "worker-0"}, 2.0),
        ({"worker": "worker-1"}, 5.0),
    ]
    assert [(s.name, s.labels["topic"][-1], s.labels["worker"]) for s in merged[1].samples] == [
        ("pulsar_in_messages_total", "a", "worker-0"),
        ("pulsar_in_messages_total", "b", "worker-1"),
    ]


def test_the_scrape_is_valid_text_with_each_worker_up_or_not():
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkersCollector({"worker-0": parse(WORKER_0)}, {"worker-0": True, "worker-1": False}))
    text = generate_latest(registry).decode()
    assert text.count("# TYPE pulsar_in_messages_total counter") == 1
    again = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parse(text) for s in f.samples}
    assert again[("magnetar_worker_up", (("worker", "worker-0"),))] == 1
    assert again[("magnetar_worker_up", (("worker", "worker-1"),))] == 0
    assert again[("pulsar_active_connections", (("worker", "worker-0"),))] == 2
