"""Messages and bytes through a topic since the broker started (Pulsar's msgInCounter and kin).

Plain counters bumped once per send and once per dispatch round, read by topic stats and
``/metrics`` (where Prometheus turns them into rates).
"""

from __future__ import annotations


class Traffic:
    __slots__ = ("bytes_in", "bytes_out", "messages_in", "messages_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.messages_out = 0
        self.bytes_out = 0
