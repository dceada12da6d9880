"""A non-persistent subscription answers what the connection asks of every subscription."""

from __future__ import annotations

from magnetar.broker.config import BrokerConfig
from magnetar.broker.consumer import Consumer
from magnetar.broker.nonpersistent import NonPersistentSubscription, NonPersistentTopic
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName

from .recording import RecordingCnx


def test_the_usual_ack_read_without_protobuf_goes_the_full_way():
    topic = NonPersistentTopic(TopicName.parse("non-persistent://public/default/np"), BrokerConfig())
    subscription = NonPersistentSubscription(topic, "s", wire.CommandSubscribe.Exclusive)
    consumer = Consumer(RecordingCnx(), subscription, 1, "c")
    subscription.add_consumer(consumer, wire.CommandSubscribe.Exclusive)
    # ServerCnx._handle_hot_ack then parses the ACK and hands it to ``acknowledge``.
    assert subscription.acknowledge_one(consumer, False, 1, 2) is False
    subscription.check_end_of_topic()  # never terminated: nothing to tell
    assert consumer.cnx.commands == []
