"""A blocking client for a broker's admin HTTP API (Pulsar's admin v2 paths).

``AdminClient`` (``core.py``) carries the connection, authentication and TLS, the calls the Spark
connector and the demo use, and ``request()`` for any path. Standard library only (urllib) besides
magnetar's client and protocol, so it runs anywhere, Spark executors included.
"""

from magnetar.client.admin.core import AdminClient, CallRunner
from magnetar.client.admin.errors import (
    AdminError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    UnauthorizedError,
    refusal,
)
from magnetar.client.admin.paths import indexed_topic, namespace_path, quote, topic_path

__all__ = [
    "AdminClient",
    "AdminError",
    "CallRunner",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "UnauthorizedError",
    "indexed_topic",
    "namespace_path",
    "quote",
    "refusal",
    "topic_path",
]
