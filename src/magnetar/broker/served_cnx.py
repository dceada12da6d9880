"""What the broker service does with the connections it serves.

``BrokerService`` keeps its connections as this Protocol, not as ``ServerCnx``: the service sits
below the connection and its handlers (they call it), and what makes connections
(``server.py``) sits above both. ``ServerCnx`` implements it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.frame_budget import FrameReceiver

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.producer import Producer


class ServedCnx(FrameReceiver, Protocol):
    """Counted and held together (the publish buffer), challenged when credentials expire,
    closed on shutdown, its producers and consumers rechecked when grants change."""

    @property
    def role(self) -> str | None:
        """The role its credentials name (None: authentication is off or not done)."""
        ...

    @property
    def worker(self) -> str | None:
        """The worker it is, when it CONNECTed with a worker's own identity (no grant names it)."""
        ...

    @property
    def producers(self) -> Mapping[int, Producer]: ...

    @property
    def consumers(self) -> Mapping[int, Consumer]: ...

    def check_credentials(self, now: float) -> None:
        """Challenge the client when its credentials expired; close it when it did not answer."""
        ...

    def close(self) -> None: ...
