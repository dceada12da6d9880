"""What a connection authenticated as one of this broker's workers (its own sealed identity,
``worker_credentials.identity``) may ask: what workers ask of each other, and nothing else.

No client's credentials are behind such a connection, so no grant is looked at for it; instead
its SUBSCRIBE must be one of these, each named by the asking worker:
- a follower's link to a spread topic's owner (docs/architecture.md, the spread): a durable
  broadcast consumer named ``magnetar.spread.<worker>`` (or its rejoin name, ``....b``) of a
  spread topic, or a non-durable one of MQTT's broadcast subscription (``MQTT_SUBSCRIBERS``) of
  any topic (the asking worker's MQTT clients follow it: docs/mqtt.md);
- a home worker deleting an expired MQTT session's durable subscription at the topic's owner
  (``mqtt/remote.py``, ``drop_subscription``): a durable consumer named ``EXPIRY_PREFIX<worker>``
  that creates no topic, which UNSUBSCRIBEs at once;
- a home worker making the durable subscription of an MQTT session that is away on a topic
  another worker just created (``mqtt/remote.py``, ``make_subscriptions``): a durable Exclusive
  or Shared consumer named ``AWAY_PREFIX<worker>`` that creates no topic, carrying the session's
  role (the role its client last authenticated as) in its metadata (``ROLE_PROPERTY``). The
  owner checks here that this role may consume the topic, with its own grants, as it checks a
  client's SUBSCRIBE: the home worker cannot subscribe a session whose role may not.
Then the consumer's own commands (FLOW, ACK, GET_LAST_MESSAGE_ID, SEEK, UNSUBSCRIBE, CLOSE_CONSUMER)
and PING/PONG. Anything else is refused with AuthorizationError. Each client of a worker was
authenticated and authorized by that worker (its SUBSCRIBE, its SEEK through its consumer).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker import authorization
from magnetar.broker.follower_topic import MQTT_SUBSCRIBERS, link_consumer_name
from magnetar.broker.request_errors import error_reply
from magnetar.protocol import Frame, ProtocolError, wire
from magnetar.protocol.broadcast import wants_broadcast
from magnetar.protocol.commands import wrap
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx

log = logging.getLogger(__name__)
T = wire.BaseCommand.Type

#: The start of the consumer name a worker deletes an expired MQTT session's subscription with.
EXPIRY_PREFIX = "magnetar.mqtt-expiry."
#: The start of the consumer name a home worker makes an away MQTT session's subscription with.
AWAY_PREFIX = "magnetar.mqtt-away."
#: The key of that consumer's metadata that names the session's role.
ROLE_PROPERTY = "magnetar.mqtt-role"
#: A worker's consumer's own commands, and the keepalive.
_CONSUMER_COMMANDS = frozenset(
    {
        T.FLOW,
        T.ACK,
        T.GET_LAST_MESSAGE_ID,
        T.SEEK,
        T.UNSUBSCRIBE,
        T.CLOSE_CONSUMER,
        T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
        T.PING,
        T.PONG,
    }
)


def expiry_consumer_name(broker_id: str) -> str:
    return f"{EXPIRY_PREFIX}{broker_id}"


def away_consumer_name(broker_id: str) -> str:
    return f"{AWAY_PREFIX}{broker_id}"


def allowed(cnx: HandlerCnx, frame: Frame) -> bool:
    """Whether worker ``cnx.auth.worker`` may ask ``frame``; a refusal is answered here."""
    worker = cnx.auth.worker
    assert worker is not None
    kind = frame.command.type
    if kind in _CONSUMER_COMMANDS:
        return True
    message = f"a worker's own identity is not authorized for {frame.type_name}"
    if kind == T.SUBSCRIBE:
        cmd = frame.command.subscribe
        if cmd.consumer_name == away_consumer_name(worker):
            refusal = _away_refusal(cnx, cmd)
            if refusal is None:
                return True
            message = refusal
        elif _workers_subscribe(cnx, worker, cmd):
            return True
    body = frame.body()
    log.info("%s: worker %s may not ask %s: %s", cnx.remote, worker, frame.type_name, message)
    if body is None or "request_id" not in body.DESCRIPTOR.fields_by_name:
        raise ProtocolError(message)
    cnx.send_command(wrap(error_reply(kind, body.request_id, wire.AuthorizationError, message)))
    return False


def _workers_subscribe(cnx: HandlerCnx, worker: str, cmd: wire.CommandSubscribe) -> bool:
    link = link_consumer_name(worker)
    is_link = cmd.consumer_name in (link, f"{link}.b") and wants_broadcast(cmd)
    if not cmd.durable:
        return is_link and cmd.subscription == MQTT_SUBSCRIBERS
    if cmd.consumer_name == expiry_consumer_name(worker):
        return not cmd.force_topic_creation
    if not is_link:
        return False
    try:
        topic = TopicName.parse(cmd.topic)
    except InvalidTopicName:
        return False
    spread = cnx.service.spread
    if not spread.is_spread(topic):
        spread.refresh()  # marked by another worker a moment ago: its notice may not be read yet
    return spread.is_spread(topic)


def _away_refusal(cnx: HandlerCnx, cmd: wire.CommandSubscribe) -> str | None:
    """Why an away MQTT session's subscription is not made (``AWAY_PREFIX``); None when it is
    made: its session's role may consume the topic (anything while authorization is off)."""
    S = wire.CommandSubscribe
    if not cmd.durable or cmd.force_topic_creation or cmd.sub_type not in (S.Exclusive, S.Shared):
        return "a worker makes only an existing topic's durable Exclusive or Shared subscription"
    if wants_broadcast(cmd):
        return "a worker makes no broadcast subscription for a session"
    roles = [pair.value for pair in cmd.metadata if pair.key == ROLE_PROPERTY]
    if len(roles) != 1 or not roles[0]:
        return f"an away session's subscription names one role ({ROLE_PROPERTY})"
    authz = cnx.service.authorization
    if authz is None:
        return None
    try:
        topic = TopicName.parse(cmd.topic)
    except InvalidTopicName:
        return f"{cmd.topic!r} is not a topic name"
    if authz.can_topic(topic, roles[0], authorization.CONSUME):
        return None
    cnx.service.authorization_failures["subscribe"] += 1
    return f"role {roles[0]!r} of the session is not authorized to consume {topic}"
