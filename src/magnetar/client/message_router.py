"""Pulsar's MessageRouter: which partition of a partitioned topic a message goes to.

As the official client routes: a ``message_router(content, partitions)`` given by the user
(CustomPartition) decides alone; else a message with a partition key goes to the partition of
the key's hash (``magnetar.protocol.key_hash``, the producer's hashing scheme); else round robin
(RoundRobinDistribution).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from magnetar.protocol.key_hash import HashingScheme, key_partition

#: The user's router: ``(content, partitions) -> partition`` (taken modulo the partitions).
CustomRouter = Callable[[bytes, int], int]


class MessageRouter:
    def __init__(
        self, partitions: int, scheme: HashingScheme | str, custom: CustomRouter | None = None
    ) -> None:
        self._partitions = partitions
        self._scheme = scheme
        self._custom = custom
        self._round_robin = itertools.cycle(range(partitions))

    def choose_partition(self, content: bytes, partition_key: str | None) -> int:
        if self._custom is not None:
            return self._custom(content, self._partitions) % self._partitions
        if partition_key:  # as the official client: an empty key is no key
            return key_partition(partition_key, self._partitions, self._scheme)
        return next(self._round_robin)
