"""Who an MQTT client is and what it may do: its CONNECT's credentials checked by the broker's
authentication providers (authentication.py), its PUBLISH and SUBSCRIBE by the grants of
authorization.py, as on the Pulsar port (docs/security.md, docs/mqtt.md).

Credentials are where Pulsar's MQTT handler (MoP) reads them:

- a JWT as the password (the user name is free), for the ``token`` provider;
- the client certificate a TLS connection (``mqtts_port``) verified, for the ``tls`` provider;
- MQTT 5's Authentication Method naming a provider (``token``) with the credentials as
  Authentication Data, checked in one step (no AUTH challenge), and checked again when the
  client re-authenticates (AUTH, Re-authenticate) before its token expires.

Without an Authentication Method the providers are tried in ``authentication_providers``'
order, each with what it reads, and the first that proves a role wins (MoP's rule). A refusal
is Mosquitto's answer, the MQTT anchor: return code 5 (Not authorized) in 3.1.1; in 5.0 0x86
(Bad User Name or Password) for credentials refused, 0x87 (Not authorized) for none at all.

Credentials that expire end the connection once expired (checked every
``authentication_refresh_check_seconds``, as the Pulsar port checks): MQTT has no way for the
broker to ask for fresh ones, so a client reconnects with a new token, or (5.0, Authentication
Method ``token``) re-authenticates before its token expires.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.authentication import AuthenticationFailed, AuthenticationProvider
from magnetar.broker.authorization import CONSUME, PRODUCE
from magnetar.broker.tls_identity import AUTH_METHOD_NAME as TLS_METHOD
from magnetar.broker.worker_credentials import Relayed
from magnetar.protocol.mqtt import Auth, Connect, ConnectReturnCode, MqttError, Properties, ReasonCode
from magnetar.protocol.mqtt.pulsar_names import namespace_of_filter, pulsar_topic
from magnetar.protocol.mqtt.topics import has_wildcard, shared_filter
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.mqtt.connection import MqttConnection

log = logging.getLogger(__name__)
R = ReasonCode
TOKEN_METHOD = "token"
#: (5.0 reason code, 3.1.1 return code, why) of a CONNECT refused.
Refusal = tuple[int, int, str]


class _Refused(Exception):
    def __init__(self, message: str, offered: bool, label: str) -> None:
        super().__init__(message)
        #: Whether the client offered credentials (refused) or none at all.
        self.offered = offered
        #: The auth method of the metrics' count.
        self.label = label


def authenticate(cnx: MqttConnection, packet: Connect) -> Refusal | None:
    """Check the CONNECT's credentials; on success the connection's ``auth`` holds the role.
    None while authentication is off (then an Authentication Method is refused: nothing can
    check it)."""
    authentication = cnx.service.authentication
    method = packet.properties.authentication_method
    if authentication is None:
        if method is not None:
            return R.BAD_AUTHENTICATION_METHOD, 0, f"authentication method {method!r}: authentication is off"
        return None
    try:
        if method is not None:
            role, provider, data = _enhanced(cnx, packet, method)
        else:
            role, provider, data = _plain(cnx, packet)
    except _Refused as refused:
        cnx.service.authentication_failures[refused.label] += 1
        if method is not None and refused.label == "other":
            return R.BAD_AUTHENTICATION_METHOD, ConnectReturnCode.NOT_AUTHORIZED, str(refused)
        code = R.BAD_USER_NAME_OR_PASSWORD if refused.offered else R.NOT_AUTHORIZED
        return code, ConnectReturnCode.NOT_AUTHORIZED, str(refused)
    auth = cnx.auth
    auth.role, auth.method = role, provider.auth_method
    auth.expires_at = provider.expires_at(data)
    cnx.relayed = Relayed(provider.auth_method, data, auth.peer_certificate)
    #: An Authentication Method at CONNECT: the client may re-authenticate with AUTH.
    auth.supports_refresh = method is not None
    cnx.service.authentication_successes[provider.auth_method] += 1
    client = packet.client_id
    log.info("%s: MQTT client %r authenticated as %r with %s", cnx.remote, client, role, auth.method)
    return None


def _enhanced(cnx: MqttConnection, packet: Connect, method: str) -> tuple[str, AuthenticationProvider, bytes]:
    """MQTT 5's Authentication Method names the provider; its Authentication Data are the credentials."""
    authentication = cnx.service.authentication
    assert authentication is not None
    provider = authentication.providers.get(method)
    if provider is None:
        enabled = ", ".join(sorted(authentication.providers))
        raise _Refused(f"authentication method {method!r} is not enabled (enabled: {enabled})", True, "other")
    data = (packet.properties.authentication_data or b"").strip()
    try:
        return provider.authenticate(data, cnx.auth.peer_certificate), provider, data
    except AuthenticationFailed as exc:
        raise _Refused(str(exc), True, method) from None


def _plain(cnx: MqttConnection, packet: Connect) -> tuple[str, AuthenticationProvider, bytes]:
    """Each provider with what it reads: the token provider the password, the TLS provider the
    client certificate; the first that proves a role."""
    authentication = cnx.service.authentication
    assert authentication is not None
    reasons = []
    label = "other"
    for provider in authentication.providers.values():
        if provider.auth_method == TOKEN_METHOD and packet.password is not None:
            data = packet.password.strip()
        elif provider.auth_method == TLS_METHOD and cnx.auth.peer_certificate is not None:
            data = b""
        else:
            continue  # nothing here for it (or a provider MQTT has no place for)
        label = provider.auth_method
        try:
            return provider.authenticate(data, cnx.auth.peer_certificate), provider, data
        except AuthenticationFailed as exc:
            reasons.append(str(exc))
    if reasons:
        raise _Refused("; ".join(reasons), True, label)
    wanted = [
        {"token": "a token as the password", "tls": "a client certificate (mqtts_port)"}.get(name, name)
        for name in authentication.providers
    ]
    raise _Refused(f"Authentication required: {' or '.join(wanted)}", False, label)


def reauthenticate(cnx: MqttConnection, packet: Auth) -> None:
    """AUTH from a 5.0 client (4.12.1): Re-authenticate with fresh credentials of the method
    and role it connected with; answered AUTH Success, or the connection is closed."""
    auth = cnx.auth
    method = packet.properties.authentication_method
    if not auth.supports_refresh or auth.method is None:
        raise MqttError(R.PROTOCOL_ERROR, "AUTH without an authentication method at CONNECT")
    if packet.reason_code != R.RE_AUTHENTICATE or method != auth.method:
        unexpected = f"AUTH {packet.reason_code:#x} with method {method!r}: not expected"
        raise MqttError(R.PROTOCOL_ERROR, unexpected)
    authentication = cnx.service.authentication
    assert authentication is not None
    provider = authentication.providers[auth.method]
    data = (packet.properties.authentication_data or b"").strip()
    try:
        role = provider.authenticate(data, auth.peer_certificate)
    except AuthenticationFailed as exc:
        cnx.service.authentication_failures[auth.method] += 1
        log.info("%s: re-authentication refused, closing: %s", cnx.remote, exc)
        cnx.close_with(R.NOT_AUTHORIZED, str(exc))
        return
    if role != auth.role:  # as Pulsar: the principal cannot change on a refresh
        cnx.service.authentication_failures[auth.method] += 1
        cnx.close_with(R.NOT_AUTHORIZED, f"re-authenticated as role {role!r}, not {auth.role!r}")
        return
    auth.expires_at = provider.expires_at(data)
    cnx.service.authentication_successes[auth.method] += 1
    cnx.send(Auth(R.SUCCESS, Properties(authentication_method=auth.method)))


def credentials_expired(cnx: MqttConnection, now: float) -> bool:
    """Close ``cnx`` if its credentials expired (5.0: DISCONNECT Not authorized)."""
    expires_at = cnx.auth.expires_at
    if cnx.closed or cnx.auth.role is None or expires_at is None or now < expires_at:
        return False
    cnx.service.authentication_failures[cnx.auth.method or "other"] += 1
    log.info("%s: the credentials of role %r expired, closing", cnx.remote, cnx.auth.role)
    cnx.close_with(R.NOT_AUTHORIZED, "the credentials expired: connect again with fresh ones")
    return True


# -- authorization ------------------------------------------------------------------------------------
def publish_refused(cnx: MqttConnection, topic: TopicName) -> str | None:
    """Why the client may not publish to ``topic`` (Pulsar's message), None if it may."""
    authz = cnx.service.authorization
    if authz is None or authz.can_topic(topic, cnx.auth.role, PRODUCE):
        return None
    cnx.service.authorization_failures["produce"] += 1
    log.info("%s: role %r is not authorized to Produce on %s", cnx.remote, cnx.auth.role, topic)
    return "Client is not authorized to Produce"


def may_subscribe(cnx: MqttConnection, topic_filter: str) -> bool:
    """May the client subscribe to ``topic_filter``: ``consume`` on the topic it names, or, for a
    filter with wildcards (which reaches topics made later), on its whole namespace. A filter
    that names no topic is left to the subscription's own checks."""
    authz = cnx.service.authorization
    if authz is None:
        return True
    try:
        shared = shared_filter(topic_filter)
    except MqttError:
        return True  # refused as malformed elsewhere
    plain = shared.topic_filter if shared is not None else topic_filter
    config = cnx.config
    tenant, namespace = config.mqtt_default_tenant, config.mqtt_default_namespace
    role = cnx.auth.role
    if has_wildcard(plain):
        allowed = authz.can_namespace(namespace_of_filter(plain, tenant, namespace)[1], role, CONSUME)
    else:
        try:
            allowed = authz.can_topic(pulsar_topic(plain, tenant, namespace), role, CONSUME)
        except InvalidTopicName:
            return True
    if not allowed:
        cnx.service.authorization_failures["subscribe"] += 1
        log.info("%s: role %r is not authorized to subscribe to %r", cnx.remote, role, topic_filter)
    return allowed


def may_consume(cnx: MqttConnection, topic: TopicName) -> bool:
    """May the client's subscriptions take messages from ``topic`` (a topic a wildcard filter
    reached, or one whose grants changed)."""
    authz = cnx.service.authorization
    return authz is None or authz.can_topic(topic, cnx.auth.role, CONSUME)


def recheck_permissions(cnx: MqttConnection, namespace: str) -> None:
    """The namespace's grants changed: producers and consumers of ``cnx`` whose role lost its
    right there go, as on the Pulsar port; the next PUBLISH is refused, and no message of
    the topic is sent any more."""
    authz = cnx.service.authorization
    if authz is None or cnx.closed:
        return
    for producer in list(cnx.producers.values()):
        topic = producer.topic.name
        if topic.namespace_name == namespace and not authz.can_topic(topic, cnx.auth.role, PRODUCE):
            log.info("%r may not produce on %s anymore: its MQTT producer closed", cnx.auth.role, topic)
            producer.close_by_broker()
    for consumer in list(cnx.consumers.values()):
        topic = consumer.subscription.topic.name
        if topic.namespace_name == namespace and not authz.can_topic(topic, cnx.auth.role, CONSUME):
            log.info("%r may not consume from %s anymore: its MQTT consumer closed", cnx.auth.role, topic)
            cnx.send_close_consumer(consumer.consumer_id)  # the MQTT connection forgets it
