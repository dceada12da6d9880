"""A producer attached to a topic through one client connection."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerCnx
    from magnetar.broker.topic import PersistentTopic


class Producer:
    def __init__(
        self,
        cnx: ServerCnx,
        topic: PersistentTopic,
        producer_id: int,
        name: str,
        user_provided_name: bool,
    ) -> None:
        self.cnx = cnx
        self.topic = topic
        self.producer_id = producer_id
        self.name = name
        self.user_provided_name = user_provided_name
        self.closed = False
        self.messages_in = 0

    def __repr__(self) -> str:
        return f"Producer({self.name!r}, id={self.producer_id}, topic={self.topic.name})"
