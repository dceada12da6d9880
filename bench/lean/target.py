"""Which broker a ``bench.lean`` run is against, with the settings the run needs.

Magnetar or the peer (``pulsar-lite``), each started as ``bench.brokers`` starts it. Chunked
runs set the broker's largest message small (Magnetar's ``max_message_size``, the peer's
``max_message_size_bytes``): the broker announces it in CONNECTED, and the producer splits
anything larger into chunks.
"""

from __future__ import annotations

from dataclasses import replace

from bench.brokers import PEER, SPECS, BrokerSpec, MagnetarSource, peer_version

BROKERS = ("magnetar", PEER)
MODES = ("broadcast", "exclusive")


def broker_spec(broker: str, fsync: str, max_message_size: int, workers: int = 1) -> BrokerSpec:
    """The spec to start: Magnetar with ``fsync`` (and ``workers`` processes), or the peer;
    ``max_message_size`` > 0 sets it."""
    if broker == PEER:
        spec = SPECS[PEER]
        extra: dict[str, object] = {"max_message_size_bytes": max_message_size} if max_message_size else {}
    else:
        spec = SPECS[f"magnetar-{'fsync' if fsync == 'always' else 'nofsync'}"]
        extra = {"max_message_size": max_message_size} if max_message_size else {}
        if workers > 1:
            extra["workers"] = workers
    return replace(spec, settings={**spec.settings, **extra}) if extra else spec


def broker_version(broker: str, source: MagnetarSource) -> str:
    return f"pulsar-lite {peer_version()}" if broker == PEER else f"magnetar {source.version()}"
