"""The virtual cursors that other writers keep on a cursor: a topic's owner and the followers that
serve its broadcast consumers on other workers each keep theirs under a key of their own
(``metadata_virtual_cursors.follower_key``). A consumer that subscribes on another worker than
before (its worker died, its new connection landed elsewhere) resumes at the place one of them
stored for its name.

The stored buckets are read in one query and kept (raw, as stored) while names are found in them;
a name not found in a snapshot older than ``max_age`` reads them again, so that many new consumers
subscribing cost a read every ``max_age`` at most, and each look-up decodes one bucket per writer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.storage import virtual_cursor_buckets as buckets
from magnetar.storage.virtual_cursors import VirtualCursorState, decode_state

if TYPE_CHECKING:
    from magnetar.storage.metadata_store import MetadataStore

log = logging.getLogger(__name__)

#: Seconds a snapshot of the other writers' buckets is used for names not found in it.
MAX_AGE_S = 2.0


class VirtualCursorsElsewhere:
    """Looks a consumer's name up in the virtual cursors the other writers stored on ``cursor``."""

    def __init__(
        self,
        metadata: MetadataStore,
        ml_id: int,
        cursor: str,
        own_key: str,
        max_age: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._metadata = metadata
        self._ml_id = ml_id
        self._cursor = cursor
        self._own_key = own_key
        self._max_age = max_age
        self._clock = clock
        #: writer's key -> bucket number -> the bucket's bytes, as of ``_read_at``.
        self._snapshot: dict[str, dict[int, bytes]] = {}
        #: (writer's key, bucket) -> its names' encoded states, decoded from the snapshot once.
        self._decoded: dict[tuple[str, int], dict[str, bytes]] = {}
        self._read_at: float | None = None
        self.reads = 0  # snapshots read (tests, stats)

    def find(self, name: str) -> VirtualCursorState | None:
        """The most advanced state another writer stored for ``name`` (by mark-delete position),
        None if none did."""
        state = self._find(name)
        now = self._clock()
        if state is None and (self._read_at is None or now - self._read_at >= self._max_age):
            self._read(now)
            state = self._find(name)
        return state

    def _read(self, now: float) -> None:
        snapshot: dict[str, dict[int, bytes]] = {}
        for key, page, data in self._metadata.virtual_cursor_family(self._ml_id, self._cursor, self._own_key):
            snapshot.setdefault(key, {})[page] = data
        self._snapshot, self._read_at = snapshot, now
        self._decoded = {}
        self.reads += 1

    def _find(self, name: str) -> VirtualCursorState | None:
        number = buckets.bucket_of(name)
        best: VirtualCursorState | None = None
        for key, pages in self._snapshot.items():
            data = pages.get(number)
            if data is None:
                continue
            try:
                names = self._decoded.get((key, number))
                if names is None:
                    names = self._decoded[key, number] = buckets.decode_bucket(data)
                encoded = names.get(name)
                state = decode_state(encoded) if encoded is not None else None
            except ValueError as exc:
                log.warning("cursor %s: a virtual cursor bucket of %r is damaged: %s", self._cursor, key, exc)
                continue
            if state is not None and (best is None or state.mark_delete > best.mark_delete):
                best = state
        return best
