"""Which broker serves a topic, through the admin API (``admin.lookups``, as the Java
PulsarAdmin's ``lookups()``): Pulsar's HTTP lookup and the bundle of a topic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.client.admin.paths import quote
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.client.admin.requests import AdminRequests


def _parts(topic: str) -> tuple[str, str]:
    """(domain, ``tenant/namespace/topic`` quoted) of a topic (short names as Pulsar reads them)."""
    parsed = TopicName.parse(topic)
    return parsed.domain, "/".join(quote(p) for p in (parsed.tenant, parsed.namespace, parsed.local_name))


class Lookups:
    def __init__(self, admin: AdminRequests) -> None:
        self._admin = admin

    def lookup_topic_data(self, topic: str) -> dict[str, Any]:
        """Pulsar's LookupData of the broker serving ``topic``: ``brokerUrl``, ``brokerUrlTls``,
        ``httpUrl``, ``httpUrlTls``, ``nativeUrl``."""
        domain, rest = _parts(topic)
        return dict(self._admin.request("GET", f"/lookup/v2/topic/{domain}/{rest}") or {})

    def lookup_topic(self, topic: str) -> str:
        """The URL of the broker serving ``topic`` (``pulsar://``, or ``pulsar+ssl://`` where only
        TLS is served), as the Java client's ``lookupTopic``."""
        data = self.lookup_topic_data(topic)
        return str(data.get("brokerUrl") or data.get("brokerUrlTls") or "")

    def get_bundle_range(self, topic: str) -> str:
        """The range of the bundle ``topic`` is in, ``0x00000000_0x40000000``."""
        domain, rest = _parts(topic)
        body, _ = self._admin.request_bytes("GET", f"/admin/v2/{domain}/{rest}/bundle")
        return body.decode().strip().strip('"')
