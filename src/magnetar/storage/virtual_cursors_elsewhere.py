"""The virtual cursors that other writers keep on a cursor: a topic's owner and the followers that
serve its broadcast consumers on other workers each keep theirs under a key of their own
(``metadata_virtual_cursors.follower_key``). A consumer that subscribes on another worker than
before (its worker died, its new connection landed elsewhere) resumes at the place one of them
stored for its name.

A name lies in one bucket (``virtual_cursor_buckets.bucket_of``), the same for every writer, so a
look-up reads that bucket of each writer in one indexed query (``place_pages_by_page``) and
decodes those that hold the name's bytes: what the writers stored last, at a cost that does not
grow with the consumers
(a copy of every writer's buckets, read again every few seconds, cost a quarter of a worker's
time while 100,000 consumers connected).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.storage import virtual_cursor_buckets as buckets
from magnetar.storage.virtual_cursors import VirtualCursorState, decode_state

if TYPE_CHECKING:
    from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)


class VirtualCursorsElsewhere:
    """Looks a consumer's name up in the virtual cursors the other writers stored on ``cursor``."""

    def __init__(self, metadata: MetadataStore, ml_id: int, cursor: str, own_key: str) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self._cursor = cursor
        self._own_key = own_key
        self.reads = 0  # look-ups made (tests, stats)

    def find(self, name: str, min_epoch: int = 0) -> VirtualCursorState | None:
        """The most advanced state another writer stored for ``name`` (by mark-delete position),
        None if none did; states written before the subscription's ``min_epoch``-th reset (a
        seek: ``VirtualCursorState.epoch``) are not taken, whoever wrote them."""
        self.reads += 1
        rows = self._metadata.virtual_cursor_bucket_everywhere(
            self._ml_id, self._cursor, buckets.bucket_of(name), self._own_key
        )
        best: VirtualCursorState | None = None
        needle = name.encode()
        for key, data in rows:
            if needle not in data:
                continue  # not there (most names are new): no need to decode the bucket
            try:
                encoded = buckets.decode_bucket(data).get(name)
                state = decode_state(encoded) if encoded is not None else None
            except ValueError as exc:
                log.warning("cursor %s: a virtual cursor bucket of %r is damaged: %s", self._cursor, key, exc)
                continue
            if state is None or state.epoch < min_epoch:
                continue
            if best is None or state.mark_delete > best.mark_delete:
                best = state
        return best
