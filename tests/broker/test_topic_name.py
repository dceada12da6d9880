import pytest

from magnetar.protocol.topic_name import InvalidTopicName, TopicName


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
