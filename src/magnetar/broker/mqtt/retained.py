"""Retained messages (3.3.1.3): the last message published with RETAIN on each topic, kept
durably and sent to each new subscription whose filter matches its topic.

One record per topic in the broker's metadata store, ``mqtt/retained/{Pulsar topic}`` -> JSON (the
payload in base64, the QoS, the MQTT 5 properties to send again, when it expires), written
through ``records.py`` (in the order the messages came, group-committed), so a retained message
is durable before its PUBACK and survives a ``kill -9``. A retained PUBLISH with an empty payload
deletes its topic's record. All records are read at start-up and held in memory, where a
SUBSCRIBE looks them up; a message whose Message Expiry Interval has passed is not sent again and
its record goes.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from magnetar.broker.mqtt.records import RecordWriter
from magnetar.protocol.mqtt import Properties
from magnetar.protocol.mqtt.pulsar_names import decode_name
from magnetar.protocol.mqtt.topics import matches
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)

PREFIX = "mqtt/retained/"


@dataclass(frozen=True, slots=True)
class Retained:
    """A retained message: where it was published, and what a subscriber is sent of it."""

    topic: str
    payload: bytes
    qos: int
    #: Its PUBLISH's properties to send again (not the Topic Alias, Subscription Identifiers or
    #: Message Expiry Interval: ``expires_at`` gives what is left of that).
    properties: Properties
    #: When it expires (wall-clock seconds); None: never.
    expires_at: float | None = None


def kept_properties(properties: Properties) -> Properties:
    """What of a PUBLISH's properties goes with its message to later subscribers."""
    return Properties(
        payload_format_indicator=properties.payload_format_indicator,
        content_type=properties.content_type,
        response_topic=properties.response_topic,
        correlation_data=properties.correlation_data,
        user_properties=properties.user_properties,
    )


def encode_retained(message: Retained) -> str:
    p = message.properties
    record: dict[str, Any] = {
        "payload": base64.b64encode(message.payload).decode(),
        "qos": message.qos,
        "expires_at": message.expires_at,
        "payload_format_indicator": p.payload_format_indicator,
        "content_type": p.content_type,
        "response_topic": p.response_topic,
        "correlation_data": None
        if p.correlation_data is None
        else base64.b64encode(p.correlation_data).decode(),
        "user_properties": [list(pair) for pair in p.user_properties],
    }
    return json.dumps(record, separators=(",", ":"))


def decode_retained(topic: str, value: str) -> Retained:
    record = json.loads(value)
    correlation = record["correlation_data"]
    properties = Properties(
        payload_format_indicator=record["payload_format_indicator"],
        content_type=record["content_type"],
        response_topic=record["response_topic"],
        correlation_data=None if correlation is None else base64.b64decode(correlation),
        user_properties=tuple((str(k), str(v)) for k, v in record["user_properties"]),
    )
    at = record["expires_at"]
    return Retained(
        topic,
        base64.b64decode(record["payload"]),
        int(record["qos"]),
        properties,
        None if at is None else float(at),
    )


class RetainedStore:
    def __init__(self, metadata: MetadataStore, writer: RecordWriter) -> None:
        self._metadata = metadata
        self._writer = writer
        #: Pulsar topic -> its retained message.
        self.messages: dict[str, Retained] = {}
        #: Called with a topic once its retained message set here is durable (workers: server.py).
        self.changed: Callable[[str], None] | None = None

    def load(self) -> list[str]:
        """Read every record (blocking: at start-up, off the loop); the keys of those that do not
        read (left alone)."""
        broken = []
        for key, value in self._metadata.items(PREFIX):
            topic = key[len(PREFIX) :]
            try:
                self.messages[topic] = decode_retained(topic, value)
            except (ValueError, KeyError, TypeError):
                broken.append(key)
        return broken

    def set(self, topic: str, message: Retained | None) -> Any:
        """``message`` is ``topic``'s retained message from now on (None: it has none); an asyncio
        future done once that is durable."""
        if message is None:
            self.messages.pop(topic, None)
            writing = self._writer.set(PREFIX + topic, None)
        else:
            self.messages[topic] = message
            writing = self._writer.set(PREFIX + topic, encode_retained(message))
        changed = self.changed
        if changed is not None:
            writing.add_done_callback(
                lambda done: None if done.cancelled() or done.exception() else changed(topic)
            )
        return writing

    def read(self, topic: str) -> str | None:
        """``topic``'s record as stored (blocking: off the loop)."""
        return self._metadata.get(PREFIX + topic)

    def reloaded(self, topic: str, value: str | None) -> None:
        """``topic``'s record read again (``read``: another worker set it), on the loop."""
        if value is None:
            self.messages.pop(topic, None)
            return
        try:
            self.messages[topic] = decode_retained(topic, value)
        except (ValueError, KeyError, TypeError):
            log.error("the MQTT retained message record of %s does not read: left as it is", topic)

    def matching(self, namespace: str, local_filter: str, now: float | None = None) -> Iterator[Retained]:
        """The retained messages of ``namespace``'s persistent topics whose decoded names
        ``local_filter`` matches, in topic order; expired ones are deleted instead."""
        now = time.time() if now is None else now
        prefix = f"persistent://{namespace}/"
        for topic in sorted(t for t in self.messages if t.startswith(prefix)):
            message = self.messages.get(topic)
            if message is None:
                continue
            try:
                local = decode_name(TopicName.parse(topic).local_name)
            except (InvalidTopicName, UnicodeDecodeError):
                continue
            if not matches(local_filter, local):
                continue
            if message.expires_at is not None and message.expires_at <= now:
                self._writer.put(PREFIX + topic, None)
                del self.messages[topic]
                continue
            yield message
