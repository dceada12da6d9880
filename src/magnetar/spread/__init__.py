"""One topic's broadcast fan-out on every worker: the links that followers keep to owners
(docs/architecture.md, the spread).

The broker keeps the spread topics and the followers (``magnetar.broker.spread``,
``magnetar.broker.follower_topic``); this layer, above the broker and the client, makes each
follower's link to the topic's owner with Magnetar's own client connection
(``link.OwnerLink``). The process that runs the broker installs it (``install``, cli/standalone.py).
"""

from __future__ import annotations

from functools import partial

from magnetar.broker.service import BrokerService
from magnetar.spread.link import OwnerLink


def install(broker: BrokerService) -> None:
    """Let ``broker``'s followers reach owners (they poll them on the cursor flush schedule)."""
    broker.spread.link_factory = partial(OwnerLink, poll_interval=broker.config.cursor_flush_interval_seconds)
