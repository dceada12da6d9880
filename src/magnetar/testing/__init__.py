"""A Magnetar broker for a user's own tests: ``embedded_broker`` for any runner, and the
``magnetar_broker`` pytest fixture (``pytest_plugin``, registered through the ``pytest11`` entry point).

Nothing here imports pytest or the broker: the broker runs as a child process, so a user's own asyncio
tests and event loops never meet the broker's.
"""

from magnetar.testing.embedded import EmbeddedBroker, embedded_broker, split_settings

__all__ = ["EmbeddedBroker", "embedded_broker", "split_settings"]
