"""The size limit a stored message is held to when a geo-replicator sends it again: the broker's
own rule (metadata + payload within ``max_message_size``, a chunk within the frame limit), so a
chunk its producer sized to the limit is not refused for the few bytes ``replicated_from`` adds."""

from magnetar.client.send_ops import stored_size_limit
from magnetar.protocol.frames import FRAME_OVERHEAD


def test_a_whole_message_is_held_to_max_message_size() -> None:
    assert stored_size_limit(100_000, is_chunk=False) == 100_000


def test_a_chunk_is_held_to_the_frame_limit_as_the_broker_does() -> None:
    assert stored_size_limit(100_000, is_chunk=True) == 100_000 + FRAME_OVERHEAD
