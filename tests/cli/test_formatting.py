"""The pure parts of produce / consume / read: ids, properties, pacing and the printed lines."""

from __future__ import annotations

import base64
import json

import pytest

from magnetar.cli.formatting import (
    due_time,
    message_id_text,
    parse_message_id,
    parse_properties,
    produce_summary,
    render,
)
from magnetar.client import Message, MessageId


def message(data: bytes, **options) -> Message:
    return Message(data, MessageId(-1, 7, 3), topic="persistent://public/default/t", **options)


def test_message_ids_print_as_pulsar_does_and_parse_back():
    assert message_id_text(MessageId(-1, 7, 3)) == "7:3:-1"
    assert message_id_text(MessageId(2, 7, 3, 4)) == "7:3:2:4"
    for text in ("7:3:-1", "7:3:2:4"):
        assert message_id_text(parse_message_id(text)) == text
    parsed = parse_message_id("12:34")
    assert (parsed.ledger_id(), parsed.entry_id(), parsed.partition(), parsed.batch_index()) == (
        12,
        34,
        -1,
        -1,
    )
    assert parse_message_id("Earliest") is MessageId.earliest
    assert parse_message_id("latest") is MessageId.latest


@pytest.mark.parametrize("text", ["", "7", "a:b", "1:2:3:4:5", "-1:0", "soon"])
def test_a_malformed_message_id_is_refused(text):
    with pytest.raises(ValueError):
        parse_message_id(text)


def test_properties_are_key_value_pairs_and_the_value_may_hold_an_equals_sign():
    assert parse_properties(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    for bad in ("novalue", "=v"):
        with pytest.raises(ValueError, match=bad):
            parse_properties([bad])


def test_sends_are_due_at_the_rate_and_all_at_once_without_one():
    assert [due_time(i, 4) for i in range(3)] == [0.0, 0.25, 0.5]
    assert due_time(1000, 0) == 0.0
    with pytest.raises(ValueError):
        due_time(1, -1)


def test_text_and_hex_lines_carry_the_payload():
    assert render(message(b"caf\xc3\xa9"), "text") == "café"
    assert render(message(b"\xff\x00"), "text") == "\ufffd\x00"
    assert render(message(b"\xff\x00"), "hex") == "ff00"


def test_the_json_line_has_id_key_properties_times_and_the_payload_as_text_or_base64():
    text = json.loads(
        render(message(b"hi", partition_key="k", properties={"a": "b"}, publish_time=5, event_time=6), "json")
    )
    assert text == {
        "id": "7:3:-1",
        "topic": "persistent://public/default/t",
        "key": "k",
        "properties": {"a": "b"},
        "publish_time": 5,
        "event_time": 6,
        "payload": "hi",
    }
    binary = json.loads(render(message(b"\xff\xfe"), "json"))
    assert "payload" not in binary and base64.b64decode(binary["payload_base64"]) == b"\xff\xfe"
    assert binary["key"] is None and binary["event_time"] is None


def test_the_summary_names_count_topic_and_rate():
    assert produce_summary(1, "t", 0.5) == "1 message successfully produced to t in 0.500 s (2.0 msg/s)"
    assert produce_summary(0, "t", 0.0).startswith("0 messages successfully produced to t")
