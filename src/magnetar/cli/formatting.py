"""Pure pieces of ``magnetar produce / consume / read``: flags in, lines out, no network.

Message ids are written as Pulsar writes them (``ledger:entry:partition`` and ``:batch`` for a
message of a batch), so an id printed by ``consume --json`` can be given back to ``read
--start-message-id``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Protocol

from magnetar.client import MessageId

OUTPUT_FORMATS = ("text", "hex", "json")


class ReceivedMessage(Protocol):
    """What the printers read of a message (``magnetar.client.Message`` has it)."""

    def data(self) -> bytes: ...
    def message_id(self) -> MessageId: ...
    def partition_key(self) -> str | None: ...
    def properties(self) -> dict[str, str]: ...
    def publish_timestamp(self) -> int: ...
    def event_timestamp(self) -> int: ...
    def topic_name(self) -> str: ...


def message_id_text(msg_id: MessageId) -> str:
    """``ledger:entry:partition`` (``:batch`` added inside a batch), as Pulsar prints ids."""
    text = f"{msg_id.ledger_id()}:{msg_id.entry_id()}:{msg_id.partition()}"
    return f"{text}:{msg_id.batch_index()}" if msg_id.batch_index() >= 0 else text


def parse_message_id(text: str) -> MessageId:
    """``earliest``, ``latest`` or ``ledger:entry[:partition[:batch]]``; ValueError otherwise."""
    word = text.strip().lower()
    if word == "earliest":
        return MessageId.earliest
    if word == "latest":
        return MessageId.latest
    parts = word.split(":")
    if not 2 <= len(parts) <= 4:
        raise ValueError(f"{text!r} is not earliest, latest or LEDGER:ENTRY[:PARTITION[:BATCH]]")
    try:
        numbers = [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"{text!r}: ledger, entry, partition and batch are integers") from None
    ledger, entry = numbers[0], numbers[1]
    partition = numbers[2] if len(numbers) > 2 else -1
    batch = numbers[3] if len(numbers) > 3 else -1
    if ledger < 0 or entry < 0:
        raise ValueError(f"{text!r}: ledger and entry are not negative")
    return MessageId(partition, ledger, entry, batch)


def parse_properties(pairs: Iterable[str]) -> dict[str, str]:
    """``key=value`` flags into a dict (the value may itself hold ``=``); ValueError otherwise."""
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"{pair!r} is not key=value")
        properties[key] = value
    return properties


def render(message: ReceivedMessage, output: str) -> str:
    """One line for a received message: its payload as text or hex, or a JSON object."""
    payload = message.data()
    if output == "hex":
        return payload.hex()
    if output == "json":
        return json.dumps(message_record(message), ensure_ascii=False)
    return payload.decode("utf-8", errors="replace")


def message_record(message: ReceivedMessage) -> dict[str, object]:
    """The JSON form: the payload as ``payload`` when it is UTF-8 text, else ``payload_base64``."""
    record: dict[str, object] = {
        "id": message_id_text(message.message_id()),
        "topic": message.topic_name(),
        "key": message.partition_key(),
        "properties": dict(message.properties()),
        "publish_time": message.publish_timestamp(),
        "event_time": message.event_timestamp() or None,
    }
    payload = message.data()
    try:
        record["payload"] = payload.decode("utf-8")
    except UnicodeDecodeError:
        record["payload_base64"] = base64.b64encode(payload).decode("ascii")
    return record


def due_time(index: int, rate: float) -> float:
    """Seconds after the start at which send number ``index`` (from 0) is due; 0 when ``rate``
    is 0 (as fast as the broker takes them). A due time, not a sleep: a slow send is caught up on."""
    if rate < 0:
        raise ValueError("the rate is not negative")
    return 0.0 if rate == 0 else index / rate


def produce_summary(count: int, topic: str, seconds: float) -> str:
    rate = count / seconds if seconds > 0 else float("inf")
    noun = "message" if count == 1 else "messages"
    return f"{count} {noun} successfully produced to {topic} in {seconds:.3f} s ({rate:,.1f} msg/s)"
