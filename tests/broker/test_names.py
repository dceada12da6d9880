"""Limits on names and protocol versions (pure logic, no network)."""

from __future__ import annotations

import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.broker.errors import NotAllowed
from magnetar.broker.handlers.handshake import PROTOCOL_VERSION, negotiated_version
from magnetar.broker.names import MAX_NAME_LENGTH, InvalidName, check_name
from magnetar.broker.request_errors import TEXT_CHECKED, error_reply
from magnetar.protocol import wire
from magnetar.protocol.topic_name import MAX_TOPIC_NAME_LENGTH, InvalidTopicName, TopicName


def test_names_up_to_the_limit_pass():
    check_name("s" * MAX_NAME_LENGTH, "subscription name")
    check_name("", "producer name")


def test_longer_or_undecodable_names_are_refused_with_not_allowed():
    with pytest.raises(InvalidName, match="subscription name of 1025 characters") as info:
        check_name("s" * (MAX_NAME_LENGTH + 1), "subscription name")
    assert isinstance(info.value, NotAllowed) and info.value.code == wire.NotAllowedError
    assert isinstance(info.value, ValueError)  # the admin API answers 400
    with pytest.raises(InvalidName, match="not valid UTF-8"):
        check_name(b"\xff", "consumer name")  # type: ignore[arg-type]


def test_topic_names_have_a_length_limit():
    prefix = "persistent://public/default/"
    TopicName.parse(prefix + "t" * (MAX_TOPIC_NAME_LENGTH - len(prefix)))
    with pytest.raises(InvalidTopicName, match="exceeds the limit"):
        TopicName.parse(prefix + "t" * (MAX_TOPIC_NAME_LENGTH - len(prefix) + 1))
    with pytest.raises(InvalidTopicName, match="exceeds the limit"):
        TopicName.parse("x" * 100_000)


def test_undecodable_topic_name_is_an_invalid_topic_name():
    with pytest.raises(InvalidTopicName, match="not valid UTF-8"):
        TopicName.parse(b"persistent://public/default/\xff")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("client", "answer"),
    [
        (-(2**31), 0),
        (-1, 0),
        (0, 0),
        (5, 5),
        (PROTOCOL_VERSION, PROTOCOL_VERSION),
        (2**31 - 1, PROTOCOL_VERSION),
    ],
)
def test_negotiated_version_is_the_lower_and_never_negative(client, answer):
    assert negotiated_version(client) == answer


def test_max_messages_per_batch_must_be_positive():
    with pytest.raises(ValueError, match="max_messages_per_batch"):
        BrokerConfig(max_messages_per_batch=0).validate()
    BrokerConfig().validate()


@pytest.mark.parametrize(
    ("cmd_type", "reply_type", "code_field"),
    [
        (wire.BaseCommand.LOOKUP, wire.CommandLookupTopicResponse, "error"),
        (wire.BaseCommand.PARTITIONED_METADATA, wire.CommandPartitionedTopicMetadataResponse, "error"),
        (wire.BaseCommand.GET_SCHEMA, wire.CommandGetSchemaResponse, "error_code"),
        (wire.BaseCommand.GET_OR_CREATE_SCHEMA, wire.CommandGetOrCreateSchemaResponse, "error_code"),
        (wire.BaseCommand.PRODUCER, wire.CommandError, "error"),
        (wire.BaseCommand.SUBSCRIBE, wire.CommandError, "error"),
    ],
)
def test_error_reply_takes_the_form_the_request_waits_for(cmd_type, reply_type, code_field):
    assert cmd_type in TEXT_CHECKED
    reply = error_reply(cmd_type, 7, wire.InvalidTopicName, "bad")
    assert type(reply) is reply_type
    assert (reply.request_id, getattr(reply, code_field)) == (7, wire.InvalidTopicName)
    assert reply.IsInitialized()
