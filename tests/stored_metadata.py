"""Message metadata as an edge cluster stored it, for the replication tests of the client and
of the replication layer."""

from __future__ import annotations

from magnetar.protocol import wire


def stored_metadata(sequence_id: int = 41, **fields) -> wire.MessageMetadata:
    """Another producer's metadata (``sensor-7``, ``sequence_id``) with ``fields`` set; a list
    value extends the repeated field of that name."""
    meta = wire.MessageMetadata(
        producer_name="sensor-7", sequence_id=sequence_id, publish_time=1_700_000_000_000
    )
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(meta, name).extend(value)
        else:
            setattr(meta, name, value)
    return meta
