"""One topic's broadcast fan-out on every worker: the links that followers keep to owners
(docs/architecture.md, the spread).

The broker keeps the spread topics and the followers (``magnetar.broker.spread``,
``magnetar.broker.follower_topic``); this layer, above the broker and the client, makes each
follower's link to the topic's owner with Magnetar's own client connection
(``link.OwnerLink``). The process that runs the broker installs it (``install``, cli/standalone.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from magnetar.broker.ownership import BrokerInfo
from magnetar.broker.service import BrokerService
from magnetar.broker.spread import LinkTarget

if TYPE_CHECKING:
    from magnetar.spread.link import OwnerLink


def install(broker: BrokerService) -> None:
    """Let ``broker``'s followers reach owners (they poll them on the cursor flush schedule); with
    authentication on, each link CONNECTs as its worker (``WorkerIdentity``)."""
    poll = broker.config.cursor_flush_interval_seconds
    secret = broker.worker_secret
    sealed = secret if broker.authentication is not None else None

    def link(
        target: LinkTarget, owner: Callable[[], BrokerInfo | None], me: str, resets: Callable[[], int]
    ) -> OwnerLink:
        # Imported at the first link: the client's modules are no part of a broker's start-up
        # (only a worker's followers use them), and importing them delayed its listening.
        from magnetar.spread.link import OwnerLink, WorkerIdentity

        if sealed is None:
            return OwnerLink(target, owner, me, resets, poll_interval=poll)
        identity = WorkerIdentity(sealed, me)
        return OwnerLink(target, owner, me, resets, poll_interval=poll, authentication=identity)

    broker.spread.link_factory = link
