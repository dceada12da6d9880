"""Durable MQTT sessions: what a broker restart must not forget of a session that outlives its
connection (4.1: the subscriptions; 3.1.2.11.2: the Session Expiry Interval).

One record per durable session in the metadata store, ``mqtt/session/{client id as hex}`` ->
JSON: its expiry, its Topic Filters and their options, the topics on which it holds a durable
subscription (to delete them when it ends), the shared subscriptions it is a member of, and
when its last connection closed (null while connected), from which its expiry is counted again
after a restart. The messages themselves wait in the durable Pulsar subscriptions.
"""

from __future__ import annotations

import json
from typing import Any

from magnetar.broker.mqtt.records import RecordWriter
from magnetar.broker.mqtt.session import FilterOptions, MqttSession
from magnetar.storage.metadata_store import MetadataStore

PREFIX = "mqtt/session/"


def key_of(client_id: str) -> str:
    # Hex: a client id may hold any character; the key must split back unambiguously.
    return f"{PREFIX}{client_id.encode().hex()}"


def encode_record(session: MqttSession) -> str:
    filters = [
        [topic_filter, o.qos, o.no_local, o.retain_as_published, o.subscription_id]
        for topic_filter, o in session.filters.items()
    ]
    record: dict[str, Any] = {
        "expiry": session.expiry,
        "filters": filters,
        "topics": sorted(session.topics),
        "groups": sorted([topic, group] for topic, group in session.groups),
        "disconnected_at": session.disconnected_at,
    }
    return json.dumps(record, separators=(",", ":"))


def decode_record(key: str, value: str) -> MqttSession:
    """The session a record holds; ValueError (KeyError, TypeError) for one that does not read."""
    client_id = bytes.fromhex(key[len(PREFIX) :]).decode()
    record = json.loads(value)
    session = MqttSession(client_id, expiry=int(record["expiry"]), durable=True, records_loaded=False)
    for topic_filter, qos, no_local, rap, subscription_id in record["filters"]:
        session.filters[str(topic_filter)] = FilterOptions(
            int(qos), bool(no_local), bool(rap), None if subscription_id is None else int(subscription_id)
        )
    session.topics = {str(topic) for topic in record["topics"]}
    session.groups = {(str(topic), str(group)) for topic, group in record["groups"]}
    at = record["disconnected_at"]
    session.disconnected_at = None if at is None else float(at)
    return session


class SessionStore:
    def __init__(self, metadata: MetadataStore, writer: RecordWriter) -> None:
        self._metadata = metadata
        self._writer = writer

    def save(self, session: MqttSession) -> Any:
        """Write the session's record as it is now; an asyncio future done once it is durable."""
        return self._writer.set(key_of(session.client_id), encode_record(session))

    def update(self, session: MqttSession) -> None:
        """``save``, nobody waiting (a failure is logged)."""
        if session.durable and not session.ended:
            self._writer.put(key_of(session.client_id), encode_record(session))

    def delete(self, client_id: str) -> Any:
        return self._writer.set(key_of(client_id), None)

    def load_all(self) -> tuple[list[MqttSession], list[str]]:
        """Every stored session (blocking: at start-up, off the loop), and the keys of records
        that do not read (left alone, and logged by the caller)."""
        sessions, broken = [], []
        for key, value in self._metadata.items(PREFIX):
            try:
                sessions.append(decode_record(key, value))
            except (ValueError, KeyError, TypeError):
                broken.append(key)
        return sessions, broken
