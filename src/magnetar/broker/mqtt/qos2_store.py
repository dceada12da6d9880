"""The QoS 2 messages a client has sent and not yet released, kept durably: what makes a PUBLISH
sent again after a broker restart be stored once.

A QoS 2 message is stored in its topic under the client's producer name and a sequence id the
broker gives it (``MqttSession.next_sequence``), and deduplication (``MessageDeduplication``)
refuses a second copy of that sequence id, across restarts too. What a restart would lose is
which sequence id the client's packet identifier stands for: a copy sent again (DUP) after a
restart would get a new one and be stored twice. So before the message is stored, this store
commits ``(client id, packet identifier) -> (topic, sequence id)`` to the broker's metadata store;
a PUBLISH of that packet identifier sent again reuses it (deduplication then answers whether it
is stored already), and the record is deleted, durably, before the PUBCOMP that frees the packet
identifier for a new message. Writes are group-committed across clients (``put_grouped``).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from magnetar.storage.metadata_store import MetadataStore

_PREFIX = "mqtt/qos2/"
#: Threads committing records: writes waiting at the same time share one SQLite commit.
THREADS = 4


class Received(NamedTuple):
    """A QoS 2 message received from a client and not yet released."""

    topic: str
    sequence_id: int


def _client_prefix(client_id: str) -> str:
    # Hex: a client id may hold any character, "/" included; the key must split back unambiguously.
    return f"{_PREFIX}{client_id.encode().hex()}/"


class Qos2Store:
    def __init__(self, metadata: MetadataStore) -> None:
        self._metadata = metadata
        self._executor = ThreadPoolExecutor(THREADS, thread_name_prefix="magnetar-mqtt-qos2")

    def put(self, client_id: str, packet_id: int, received: Received) -> asyncio.Future[None]:
        value = json.dumps({"topic": received.topic, "sequence_id": received.sequence_id})
        key = f"{_client_prefix(client_id)}{packet_id}"
        return asyncio.get_running_loop().run_in_executor(
            self._executor, self._metadata.put_grouped, key, value
        )

    def delete(self, client_id: str, packet_id: int) -> asyncio.Future[None]:
        key = f"{_client_prefix(client_id)}{packet_id}"
        return asyncio.get_running_loop().run_in_executor(self._executor, self._metadata.delete_grouped, key)

    def load(self, client_id: str) -> asyncio.Future[dict[int, Received]]:
        """The records of ``client_id``, by packet identifier."""
        return asyncio.get_running_loop().run_in_executor(self._executor, self._load, client_id)

    def delete_all(self, client_id: str) -> asyncio.Future[None]:
        """Forget the client's records (its session ended, or it started clean)."""
        return asyncio.get_running_loop().run_in_executor(self._executor, self._delete_all, client_id)

    def _load(self, client_id: str) -> dict[int, Received]:
        prefix = _client_prefix(client_id)
        out: dict[int, Received] = {}
        for key in self._metadata.keys(prefix):
            value = self._metadata.get(key)
            if value is not None:
                record = json.loads(value)
                out[int(key[len(prefix) :])] = Received(record["topic"], int(record["sequence_id"]))
        return out

    def _delete_all(self, client_id: str) -> None:
        for key in self._metadata.keys(_client_prefix(client_id)):
            self._metadata.delete_grouped(key)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
