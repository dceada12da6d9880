import pytest

from magnetar.protocol.topic_name import (
    InvalidTopicName,
    TopicName,
    filter_topics,
    full_topic_name,
    partition_name,
    split_partition,
    split_topic_pattern,
)


@pytest.mark.parametrize(
    ("given", "full"),
    [
        ("my-topic", "persistent://public/default/my-topic"),
        ("tenant/ns/t", "persistent://tenant/ns/t"),
        ("persistent://a/b/c", "persistent://a/b/c"),
        ("non-persistent://a/b/c", "non-persistent://a/b/c"),
    ],
)
def test_names_expand_like_pulsar(given, full):
    assert str(TopicName.parse(given)) == full


def test_partition_index():
    assert TopicName.parse("persistent://a/b/t-partition-3").partition_index == 3
    assert TopicName.parse("persistent://a/b/t").partition_index == -1


def test_a_partition_name_and_its_base_go_both_ways():
    base = TopicName.parse("non-persistent://a/b/t")
    partition = base.partition(2)
    assert str(partition) == "non-persistent://a/b/t-partition-2"
    assert partition.partition_index == 2 and partition.partitioned_base() == base


@pytest.mark.parametrize("bad", ["", "a/b", "http://a/b/c", "persistent://a/b", "persistent://a//c", "x y"])
def test_invalid_names_are_refused(bad):
    with pytest.raises(InvalidTopicName):
        TopicName.parse(bad)


def test_a_short_name_completes_and_a_full_name_is_left_as_it_is():
    assert full_topic_name("t") == "persistent://public/default/t"
    assert full_topic_name("a/b/t") == "persistent://a/b/t"
    assert full_topic_name("non-persistent://a/b/t") == "non-persistent://a/b/t"
    with pytest.raises(InvalidTopicName, match="short topic name"):
        full_topic_name("a/t")


def test_partition_names_split_into_their_topic_and_index():
    name = partition_name("persistent://a/b/t", 4)
    assert name == "persistent://a/b/t-partition-4"
    assert split_partition(name) == ("persistent://a/b/t", 4)
    assert split_partition("persistent://a/b/t-partition-x") == ("persistent://a/b/t-partition-x", -1)
    # only the last suffix counts, as Pulsar reads it
    assert split_partition("t-partition-1-partition-2") == ("t-partition-1", 2)


def test_a_pattern_names_its_domain_and_namespace():
    assert split_topic_pattern("orders-.*") == (
        "persistent",
        "public/default",
        "persistent://public/default/orders-.*",
    )
    assert split_topic_pattern("non-persistent://acme/iot/dev-[0-9]+") == (
        "non-persistent",
        "acme/iot",
        "non-persistent://acme/iot/dev-[0-9]+",
    )
    for bad in ("persistent://acme", "persistent://acme/iot/", "kafka://a/b/c", "a/b.*"):
        with pytest.raises(InvalidTopicName):
            split_topic_pattern(bad)


def test_a_broker_filters_topics_as_pulsar_does_for_a_regex_subscription():
    topics = [
        "persistent://public/default/orders-eu",
        "persistent://public/default/orders-us-partition-0",
        "persistent://public/default/orders-us-partition-1",
        "persistent://public/default/ordersx",
        "persistent://public/default/audit-orders-eu",
    ]
    taken = [
        "persistent://public/default/orders-eu",
        "persistent://public/default/orders-us-partition-0",
        "persistent://public/default/orders-us-partition-1",
    ]
    # With or without its domain; matched whole, a partition by its topic's name.
    assert filter_topics(topics, "persistent://public/default/orders-.*") == taken
    assert filter_topics(topics, "public/default/orders-.*") == taken
    assert filter_topics(topics, "public/default/orders-us") == taken[1:]
    assert filter_topics(topics, "public/default/orders") == []
    assert filter_topics(topics, "persistent://public/default/(") is None  # no regex: not filtered
