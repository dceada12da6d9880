"""What a consumer asks the broker for: its options (``ConsumerConfig``) and the SUBSCRIBE they make."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import cast

from magnetar.client.message import MessageId
from magnetar.protocol import broadcast
from magnetar.protocol import pulsar_wire_pb2 as wire

_Sub = wire.CommandSubscribe


class ConsumerType(enum.IntEnum):
    Exclusive = _Sub.Exclusive
    Shared = _Sub.Shared
    Failover = _Sub.Failover
    KeyShared = _Sub.Key_Shared
    #: Every consumer of the subscription receives every message (a Magnetar broker's broadcast
    #: subscription). Sent as Exclusive with the broadcast subscription property, so each
    #: consumer may also acknowledge cumulatively.
    Broadcast = -1


class InitialPosition(enum.IntEnum):
    Latest = _Sub.Latest
    Earliest = _Sub.Earliest


@dataclass(slots=True)
class ConsumerConfig:
    subscription_name: str
    consumer_type: int = ConsumerType.Exclusive
    initial_position: int = InitialPosition.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    unacked_messages_timeout_ms: int = 0
    negative_ack_redelivery_delay_ms: int = 60_000
    max_pending_chunked_message: int = 10
    auto_ack_oldest_chunked_message_on_queue_full: bool = False
    expire_time_of_incomplete_chunked_message_ms: int = 60_000
    properties: dict[str, str] | None = None
    subscription_properties: dict[str, str] | None = None
    is_read_compacted: bool = False
    replicate_subscription_state_enabled: bool = False
    start_message_id_inclusive: bool = False
    batch_index_ack_enabled: bool = False
    priority_level: int | None = None
    ack_group_time_ms: int = 100
    # Readers: a non-durable subscription starting at a given message id.
    durable: bool = True
    start_message_id: MessageId | None = None

    @property
    def shared(self) -> bool:
        return int(self.consumer_type) in (ConsumerType.Shared, ConsumerType.KeyShared)

    @property
    def broadcast(self) -> bool:
        return int(self.consumer_type) == ConsumerType.Broadcast


def subscribe_command(
    cfg: ConsumerConfig, topic: str, consumer_id: int, epoch: int, start: MessageId | None
) -> wire.CommandSubscribe:
    """The SUBSCRIBE for ``cfg``; ``start`` is where a non-durable subscription begins (or resumes)."""
    body = _Sub(
        topic=topic,
        subscription=cfg.subscription_name,
        # The enums' values are the wire's (a broadcast goes as Exclusive).
        sub_type=_Sub.Exclusive if cfg.broadcast else cast("_Sub.SubType.ValueType", int(cfg.consumer_type)),
        consumer_id=consumer_id,
        request_id=0,
        durable=cfg.durable,
        initial_position=cast("_Sub.InitialPosition.ValueType", int(cfg.initial_position)),
        read_compacted=cfg.is_read_compacted,
        replicate_subscription_state=cfg.replicate_subscription_state_enabled,
    )
    if cfg.consumer_name:
        body.consumer_name = cfg.consumer_name
    if cfg.priority_level is not None:
        body.priority_level = cfg.priority_level
    if not cfg.durable and start is not None:
        body.start_message_id.CopyFrom(start.to_proto(with_batch=True))
    if not cfg.shared:
        body.consumer_epoch = epoch
    for key, value in (cfg.properties or {}).items():
        body.metadata.add(key=key, value=value)
    for key, value in (cfg.subscription_properties or {}).items():
        body.subscription_properties.add(key=key, value=value)
    if cfg.broadcast:
        body.subscription_properties.add(key=broadcast.BROADCAST_PROPERTY, value=broadcast.BROADCAST_VALUE)
    if int(cfg.consumer_type) == ConsumerType.KeyShared:
        body.key_shared_meta.key_shared_mode = wire.AUTO_SPLIT
    return body
