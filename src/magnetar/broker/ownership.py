"""Who owns which bundle: the seam between the brokers (workers) and the store they share.

Pulsar keeps this in its metadata store (ZooKeeper, etcd ...): each broker has an ephemeral
registration (``/loadbalance/brokers/...``), and a bundle is owned by the broker that wrote its
ephemeral ownership node first; both vanish with the broker's session. ``OwnershipStore`` is that
contract as the broker uses it, so that a store shared by processes on one machine
(``ownership_sqlite.py``) and, later, a distributed one implement the same calls. A session is a
lease here: a broker renews it, and a broker whose lease ran out owns nothing any more.

``LocalOwnership`` is the store of a broker alone (one process, the default): it owns every bundle
and nothing is written anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

#: The change notice of a topic made spread (``mark_spread``): every broker reads them again.
SPREAD_CHANGE = "spread"


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """A live broker (worker) as lookups name it: Pulsar's LookupData fields."""

    broker_id: str
    service_url: str | None
    service_url_tls: str | None = None
    web_url: str | None = None
    web_url_tls: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerId": self.broker_id,
            "brokerUrl": self.service_url,
            "brokerUrlTls": self.service_url_tls,
            "httpUrl": self.web_url,
            "httpUrlTls": self.web_url_tls,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BrokerInfo:
        return cls(
            str(data["brokerId"]),
            data.get("brokerUrl"),
            data.get("brokerUrlTls"),
            data.get("httpUrl"),
            data.get("httpUrlTls"),
        )


class OwnershipStore(Protocol):
    """Brokers' sessions, bundle owners, and notice of metadata changes, shared by every broker.

    A bundle is named by its full name, ``tenant/namespace/0x00000000_0x40000000``.
    """

    def register(self, broker: BrokerInfo) -> None:
        """Open ``broker``'s session, or renew it with new URLs (the bundles it still holds stay
        its own: a broker that ends its session holds none, ``unregister``)."""

    def renew(self, broker_id: str) -> bool:
        """Extend the session; False if it had already run out (the broker then owns nothing and
        must register again and drop what it served)."""

    def unregister(self, broker_id: str) -> None:
        """End the session: its bundles have no owner."""

    def brokers(self) -> list[BrokerInfo]:
        """The brokers whose sessions are live."""

    def owner(self, bundle: str) -> BrokerInfo | None:
        """The live owner of ``bundle``, None if it has none."""

    def assign(self, bundle: str, candidate: str) -> BrokerInfo:
        """``bundle``'s owner: the live one it has, or else ``candidate``, made its owner."""

    def release(self, bundle: str, broker_id: str) -> bool:
        """Drop ``broker_id``'s ownership of ``bundle`` (an unload); False if it did not own it."""

    def release_all(self, prefix: str) -> None:
        """Drop the owners of every bundle whose name starts with ``prefix`` (a split namespace's)."""

    def owned(self, broker_id: str) -> list[str]:
        """The bundles ``broker_id`` owns."""

    def bundle_counts(self) -> dict[str, int]:
        """Bundles owned per live broker (0 for one that owns none): what assignment balances."""

    def mark_spread(self, topic: str) -> bool:
        """Record that ``topic``'s broadcast consumers are served by every broker (its owner serves
        a broadcast subscription; docs/architecture.md, the spread), telling the others
        (``SPREAD_CHANGE``); False if it was already."""

    def spread_topics(self) -> set[str]:
        """The topics marked spread."""

    def note_reset(self, topic: str, subscription: str) -> None:
        """``subscription`` of the spread ``topic`` is being reset (a seek), before its consumers
        are closed: the followers' links, subscribing again, find it (``resets``) and start their
        consumers over."""

    def resets(self, topic: str, subscription: str) -> int:
        """How many times ``note_reset`` was told of ``subscription`` of ``topic``."""

    def note_link_idle(self, topic: str, subscription: str, broker_id: str, idle: bool) -> None:
        """``broker_id`` follows ``subscription`` of the spread ``topic`` with no consumer
        connected there (``idle``), or with one again: its link's consumer at the owner then does not
        hold an UNSUBSCRIBE back (``idle_links``). Ending a session forgets its notes."""

    def idle_links(self, topic: str, subscription: str) -> set[str]:
        """The brokers whose link to ``subscription`` of ``topic`` serves no connected consumer."""

    def pin_lookup(self, topic: str, host: str, seconds: float) -> None:
        """Something of the spread ``topic`` that only its owner serves was refused to a client at
        ``host`` that had not looked the topic up over the binary protocol (an HTTP lookup): its
        next HTTP lookup of the topic within ``seconds`` names the owner
        (``take_pinned_lookup``). Pins add up: one lookup takes one."""

    def take_pinned_lookup(self, topic: str, host: str) -> bool:
        """Whether an HTTP lookup of ``topic`` from ``host`` names the owner: True takes one pin."""

    def topic_loaded(self, broker_id: str, topic: str, loaded: bool) -> None:
        """``topic``, which exists only while a broker has it loaded (a non-persistent topic), is
        loaded on ``broker_id`` now (or no longer): so that every broker lists it (Pulsar asks each
        bundle's owner for its non-persistent topics). Ending a session forgets its topics."""

    def loaded_topics(self, prefix: str) -> list[str]:
        """The topics live brokers said they have loaded (``topic_loaded``) whose names start with
        ``prefix`` (``non-persistent://tenant/ns/``), sorted."""

    def publish_change(self, path: str) -> None:
        """Tell every broker that the metadata at ``path`` changed (e.g. ``namespace/t/ns``)."""

    def changes_since(self, version: int) -> tuple[int, list[str]]:
        """The paths changed after ``version`` and the version now; ``"*"`` among them when the
        store no longer knows every change since (everything may have changed). A broker
        starting asks with 0 and keeps only the version."""

    def close(self) -> None: ...


class LocalOwnership:
    """One broker alone: it is the owner of every bundle; nothing is stored or shared."""

    def __init__(self) -> None:
        self._me: BrokerInfo | None = None

    def register(self, broker: BrokerInfo) -> None:
        self._me = broker

    def renew(self, broker_id: str) -> bool:
        return True

    def unregister(self, broker_id: str) -> None:
        self._me = None

    def brokers(self) -> list[BrokerInfo]:
        return [self._me] if self._me is not None else []

    def owner(self, bundle: str) -> BrokerInfo | None:
        return self._me

    def assign(self, bundle: str, candidate: str) -> BrokerInfo:
        if self._me is None:
            raise RuntimeError("the broker is not registered")
        return self._me

    def release(self, bundle: str, broker_id: str) -> bool:
        return self._me is not None and self._me.broker_id == broker_id

    def release_all(self, prefix: str) -> None:
        pass

    def owned(self, broker_id: str) -> list[str]:
        return []

    def bundle_counts(self) -> dict[str, int]:
        return {self._me.broker_id: 0} if self._me is not None else {}

    def mark_spread(self, topic: str) -> bool:
        return False  # alone, it serves every consumer itself

    def spread_topics(self) -> set[str]:
        return set()

    def note_reset(self, topic: str, subscription: str) -> None:
        pass  # nothing is spread: no follower to tell

    def resets(self, topic: str, subscription: str) -> int:
        return 0

    def note_link_idle(self, topic: str, subscription: str, broker_id: str, idle: bool) -> None:
        pass  # nothing is spread: no link

    def idle_links(self, topic: str, subscription: str) -> set[str]:
        return set()

    def pin_lookup(self, topic: str, host: str, seconds: float) -> None:
        pass  # nothing is spread: every lookup names this broker

    def take_pinned_lookup(self, topic: str, host: str) -> bool:
        return False

    def topic_loaded(self, broker_id: str, topic: str, loaded: bool) -> None:
        pass  # the broker's own loaded topics are all there are

    def loaded_topics(self, prefix: str) -> list[str]:
        return []

    def publish_change(self, path: str) -> None:
        pass

    def changes_since(self, version: int) -> tuple[int, list[str]]:
        return version, []

    def close(self) -> None:
        pass
