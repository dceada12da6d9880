"""Durable MQTT sessions: what a broker restart must not forget of a session that outlives its
connection (4.1: the subscriptions; 3.1.2.11.2: the Session Expiry Interval).

One record per durable session in the metadata store, ``mqtt/session/{client id as hex}`` ->
JSON: its expiry, its Topic Filters and their options, the topics on which it holds a durable
subscription (to delete them when it ends), the shared subscriptions it is a member of, and
when its last connection closed (null while connected), from which its expiry is counted again
after a restart, and the will its last connection left held back by a Will Delay Interval
(``will``: the will as a CONNECT packet carrying it, in base64, our codec's bytes; when it is due;
the role it is published as), so that a restart publishes it too; and the role its last connection
authenticated as (``role``, with authentication on: what its home may subscribe it to at another
worker while it is away). The packet identifiers of the messages it was sent and has not
acknowledged (``in_flight``: topic, ledger, entry, index, packet identifier, QoS): all of them
while no connection serves it (written when its connection closes, and when the broker stops),
those sent at QoS 2 always (written before each such PUBLISH goes under a new identifier); and
those of its PUBRELs not answered (``released``: written before each PUBREL goes), so that a
resumed session gets them again under the same identifiers after a restart, a kill -9 too
(4.4); and the QoS 2 messages the client PUBREC'd whose acknowledgement may not be on
disk yet (``delivered``: topic, ledger, entry, index; written before each PUBREL goes), which a
restarted broker does not send again (``session.py``). The messages themselves wait in the
durable Pulsar subscriptions.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from magnetar.broker.mqtt.records import RecordWriter
from magnetar.broker.mqtt.session import FilterOptions, MqttSession
from magnetar.protocol.mqtt import MQTT_5, Connect, MqttDecoder, Will, encode
from magnetar.storage.metadata_store import MetadataStore

PREFIX = "mqtt/session/"


def key_of(client_id: str) -> str:
    # Hex: a client id may hold any character; the key must split back unambiguously.
    return f"{PREFIX}{client_id.encode().hex()}"


def encode_record(session: MqttSession, in_flight: bool = False) -> str:
    """The session's record; with all it has in flight while no connection serves it (or
    ``in_flight``: the broker is stopping): while one does, that changes with every message and
    lives in memory, but for its QoS 2 messages (kept up to date: written before each goes)."""
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
    if session.role is not None:
        record["role"] = session.role
    if session.unacked and (sent := session.in_flight(in_flight or session.connection is None)):
        record["in_flight"] = [[*key, packet_id, qos] for key, packet_id, qos in sent]
    if released := session.released_ids():  # kept up to date: written before each PUBREL
        record["released"] = released
    if delivered := session.delivered_keys():  # kept up to date: written before each PUBREL
        record["delivered"] = [list(key) for key in delivered]
    if session.pending_will is not None:
        record["will"] = {
            "packet": base64.b64encode(_will_packet(session.pending_will[0])).decode(),
            "due": session.will_due,
            "role": session.will_role,
        }
    return json.dumps(record, separators=(",", ":"))


def _will_packet(will: Will) -> bytes:
    return encode(Connect("", MQTT_5, will=will), MQTT_5)


def _will_of(packet: bytes) -> Will:
    decoder = MqttDecoder(len(packet) + 16)
    decoder.feed(packet)
    connect = decoder.next_packet()
    if not isinstance(connect, Connect) or connect.will is None:
        raise ValueError("a held-back will record holds no will")
    return connect.will


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
    role = record.get("role")
    session.role = None if role is None else str(role)
    at = record["disconnected_at"]
    session.disconnected_at = None if at is None else float(at)
    for topic, ledger, entry, index, packet_id, *qos in record.get("in_flight", ()):
        # Without its QoS (an older record): taken as QoS 2, kept in the record until answered.
        message = (str(topic), int(ledger), int(entry), int(index))
        session.sent(message, int(packet_id), int(qos[0]) if qos else 2)
    for packet_id in record.get("released", ()):
        session.released.add(int(packet_id))
    for topic, ledger, entry, index in record.get("delivered", ()):
        session.delivered((str(topic), int(ledger), int(entry), int(index)))
    held = record.get("will")
    if held is not None:  # its connection is made again at restore (Sessions.restore)
        session.pending_will = (_will_of(base64.b64decode(held["packet"])), None)
        session.will_due = float(held["due"])
        session.will_role = None if held["role"] is None else str(held["role"])
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

    def stopping(self, session: MqttSession) -> None:
        """The broker stops under the session's connection: its record, as of its connection's
        end now, with what it has in flight (written by ``flush_now``)."""
        if session.durable and not session.ended:
            self._writer.put(key_of(session.client_id), encode_record(session, in_flight=True))

    def flush_now(self) -> None:
        self._writer.flush_now()

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
