"""The pure parts of geo-replication's model: a topic's effective clusters, one message's, and the
check of a replication-clusters body."""

from __future__ import annotations

import pytest

from magnetar.broker.clusters import check_cluster_data, check_cluster_name
from magnetar.broker.errors import NotAllowed
from magnetar.broker.replication import (
    ClusterNotAllowed,
    check_clusters,
    effective_clusters,
    message_clusters,
)
from magnetar.protocol import wire


def test_topic_override_wins_and_the_local_cluster_is_left_out():
    assert effective_clusters(None, None, "edge") == []
    assert effective_clusters(None, ["edge"], "edge") == []
    assert effective_clusters(None, ["edge", "central", "other"], "edge") == ["central", "other"]
    assert effective_clusters(["other"], ["edge", "central"], "edge") == ["other"]
    assert effective_clusters(["edge"], ["edge", "central"], "edge") == [], "an override to local only"
    assert effective_clusters(["a", "a", "b"], None, "edge") == ["a", "b"]


def test_a_message_replicate_to_narrows_the_topic_clusters():
    assert message_clusters(["central", "other"], []) == ["central", "other"]
    assert message_clusters(["central", "other"], ["other"]) == ["other"]
    assert message_clusters(["central", "other"], ["edge"]) == [], "local only: not replicated"
    assert message_clusters(["central"], ["nowhere"]) == []


def test_replicate_to_as_the_client_sets_it_in_message_metadata():
    metadata = wire.MessageMetadata(producer_name="p", sequence_id=0, publish_time=0)
    metadata.replicate_to.extend(["other"])
    decoded = wire.MessageMetadata.FromString(metadata.SerializeToString())
    assert message_clusters(["central", "other"], decoded.replicate_to) == ["other"]


def test_check_clusters_answers_as_pulsar():
    known, allowed = ["edge", "central"], ["edge"]
    assert check_clusters(["edge", "edge"], known, allowed) == ["edge"]
    with pytest.raises(ValueError):
        check_clusters("edge", known, allowed)
    for bad in ([], ["global"], ["nowhere"]):
        with pytest.raises(NotAllowed):
            check_clusters(bad, known, allowed)
    with pytest.raises(ClusterNotAllowed):
        check_clusters(["central"], known, allowed)


def test_cluster_data_keeps_known_fields_and_checks_schemes():
    data = {"serviceUrl": "http://a:8080", "serviceUrlTls": "https://a:8443", "unknown": 1}
    assert check_cluster_data(data) == {"serviceUrl": "http://a:8080", "serviceUrlTls": "https://a:8443"}
    for bad in (
        {"serviceUrl": "pulsar://a"},
        {"serviceUrlTls": "http://a"},
        {},
        [],
        {"brokerServiceUrl": "pulsar://a"},
    ):
        with pytest.raises(ValueError):
            check_cluster_data(bad)
    with pytest.raises(ValueError):
        check_cluster_name("global")
    assert check_cluster_name("us-west.1") == "us-west.1"
