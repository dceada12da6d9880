"""What several command handlers ask before they act: may this connection's role do it
(authorization.py), is the topic named well, and is the topic (or a new durable subscription)
to be opened off the loop first (``BrokerService.preparing``)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker import authorization
from magnetar.broker.descriptors import OutOfDescriptors
from magnetar.broker.errors import BrokerError, InvalidTopicNameError, PersistenceError, as_broker_error
from magnetar.broker.limits import LimitReached
from magnetar.broker.namespace_service import ServiceUnitNotReady
from magnetar.broker.request_errors import error_reply
from magnetar.protocol import Frame, ProtocolError, wire
from magnetar.protocol.commands import wrap
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.handlers.cnx import HandlerCnx

log = logging.getLogger(__name__)


def topic_name(name: str) -> TopicName:
    """The topic a client named; InvalidTopicNameError (answered to the request) if it is not one."""
    try:
        return TopicName.parse(name)
    except InvalidTopicName as exc:
        raise InvalidTopicNameError(str(exc)) from None


def check_served(cnx: HandlerCnx, name: str) -> None:
    """Raise ServiceUnitNotReady (ServiceNotReady, "... not served by this instance ... Please
    redo the lookup") unless this broker owns the bundle of the topic named: the client then
    looks the topic up again and goes to its owner, as with Pulsar's brokers."""
    if cnx.service.shares_bundles:  # alone, it serves them all (and a bad name is the handler's)
        topic = topic_name(name)
        try:
            cnx.service.check_served_here(topic)
        except ServiceUnitNotReady:
            pin_to_owner(cnx, topic)
            raise


def served_or_followed(cnx: HandlerCnx, cmd: wire.CommandSubscribe) -> bool:
    """``check_served`` for a SUBSCRIBE, which a follower serves on a worker that does not own
    the topic when it is a durable broadcast one of a spread topic (spread.py): True then."""
    if not cnx.service.shares_bundles:
        return False
    topic = topic_name(cmd.topic)
    spread = cnx.service.spread
    if spread.is_spread(topic):  # without asking the owners' store, while it is clear
        if str(topic) in cnx.service.topics:
            return False  # loaded here: owned here (an owner that loses a bundle unloads it first)
        if spread.follower(topic) is not None and spread.follows(topic, cmd):
            return True  # followed here: not owned (a follower that becomes the owner goes)
    if cnx.service.serves(topic):
        return False
    if spread.follows(topic, cmd):
        return True
    check_served(cnx, cmd.topic)  # raises, the topic pinned to its owner on this connection
    return False


def pin_to_owner(cnx: HandlerCnx, topic: TopicName) -> None:
    """Something of a spread topic that only its owner serves was asked here: this connection's
    LOOKUPs of the topic name the owner from now on, so that the client's retry (a LOOKUP on the
    same connection, then the request at the broker named) reaches it. A client that found this
    port without a LOOKUP here (Pulsar's HTTP lookup) retries with an HTTP lookup instead: the
    next one from its host names the owner (``Spread.pin_lookup``)."""
    spread = cnx.service.spread
    if spread.is_spread(topic):
        name = str(topic)
        if cnx.owner_pinned is None:
            cnx.owner_pinned = set()
        cnx.owner_pinned.add(name)
        if cnx.looked_up_spread is None or name not in cnx.looked_up_spread:
            spread.pin_lookup(topic, cnx.remote.rsplit(":", 1)[0])


def followed_first(cnx: HandlerCnx, frame: Frame, cmd: wire.CommandSubscribe) -> bool:
    """True when the follower subscription a SUBSCRIBE needs is first opened (its link to the
    owner, then the topic's files: ``Spread.preparing``); ``frame`` is handled again once it is, or
    answered with the error that stopped it."""
    if frame is cnx.rerun:
        return False
    preparing = cnx.service.spread.preparing(topic_name(cmd.topic), cmd)
    if preparing is None:
        return False
    preparing.add_done_callback(lambda future: _followed(cnx, future, frame, cmd.request_id))
    return True


def _followed(cnx: HandlerCnx, future, frame: Frame, request_id: int) -> None:
    if cnx.closed:
        return
    if future.cancelled():
        cnx.send_error(request_id, BrokerError("the broker is stopping", wire.ServiceNotReady))
        return
    if (failure := future.exception()) is not None:
        cnx.send_error(request_id, as_broker_error(failure, "following the topic at its owner"))
        return
    cnx.rerun = frame
    try:
        cnx.handle_again(frame)
    except ProtocolError as exc:
        cnx.protocol_error(exc)
    finally:
        cnx.rerun = None


def authorize(cnx: HandlerCnx, topic: TopicName, operation: str, label: str, what: str) -> None:
    """Raise AuthorizationError (Pulsar's "Client is not authorized to ...") unless the
    connection's role may do ``operation`` on ``topic``; nothing is checked while authorization is off."""
    authz = cnx.service.authorization
    if cnx.auth.worker is not None:
        return  # one of this broker's workers: what it may ask is limited instead (worker_access.py)
    if authz is not None and not authz.can_topic(topic, cnx.auth.role, operation):
        refuse_unauthorized(cnx, label, what, str(topic))


def authorize_name(cnx: HandlerCnx, topic: str, operation: str, label: str, what: str) -> None:
    """As ``authorize`` for a topic named by the client (a bad name is left to the handler)."""
    if cnx.service.authorization is None:
        return
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName:
        return
    authorize(cnx, name, operation, label, what)


def refuse_unauthorized(cnx: HandlerCnx, label: str, what: str, target: str) -> None:
    cnx.service.authorization_failures[label] += 1
    log.info("%s: role %r is not authorized to %s on %s", cnx.remote, cnx.auth.role, what, target)
    raise authorization.AuthorizationError(f"Client is not authorized to {what}")


def opened_first(
    cnx: HandlerCnx, frame: Frame, topic: str, request_id: int, subscription: tuple[str, str] | None = None
) -> bool:
    """True when the topic (or a new durable subscription) is first opened off the loop
    (``BrokerService.preparing``): ``frame`` is then handled again once it is, and other
    commands, on this connection and every other, go on meanwhile."""
    if frame is cnx.rerun:
        return False
    try:
        name = TopicName.parse(topic)
    except InvalidTopicName:
        return False  # the handler answers the error
    preparing = cnx.service.preparing(name, subscription)
    if preparing is None:
        return False
    preparing.add_done_callback(lambda future: _opened(cnx, future, frame, topic, request_id))
    return True


def _opened(cnx: HandlerCnx, future, frame: Frame, topic: str, request_id: int) -> None:
    """The open that ``opened_first`` waited for is done: handle ``frame`` again."""
    if cnx.closed:
        return
    failure = None if future.cancelled() else future.exception()
    if isinstance(failure, (PersistenceError, LimitReached, OutOfDescriptors)) or (
        failure is not None and not isinstance(failure, BrokerError)
    ):
        # Storage failed (a full disk, no descriptors left): answered here, not opened again
        # on the loop. Other refusals (no such topic ...) the handler answers on its rerun.
        failed = as_broker_error(failure, f"opening {topic}")
        cnx.send_command(wrap(error_reply(frame.type, request_id, failed.code, str(failed))))
        return
    cnx.rerun = frame
    try:
        cnx.handle_again(frame)
    except ProtocolError as exc:
        cnx.protocol_error(exc)
    except Exception as exc:  # the topic could not be loaded: this request fails, nothing else
        log.exception("%s: handling %s for %s failed", cnx.remote, frame.type_name, topic)
        cnx.send_error(request_id, BrokerError(f"loading {topic} failed: {exc}", wire.ServiceNotReady))
    finally:
        cnx.rerun = None
