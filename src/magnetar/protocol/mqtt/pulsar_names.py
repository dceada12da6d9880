"""MQTT Topic Names as Pulsar topics, as Pulsar's MQTT handler (MoP) maps them by default.

An MQTT name ``a/b c`` is the topic ``persistent://{tenant}/{namespace}/`` + its URL-encoded form
(Java's ``URLEncoder``: letters, digits and ``.-_`` as they are, every other byte of its UTF-8 as
``%XX``), so ``sensors/temp`` is ``persistent://public/default/sensors%2Ftemp``. A name that starts
with ``persistent://tenant/namespace/`` names its namespace itself, and the rest is encoded the
same way. Two differences from MoP, because Magnetar's topic names allow neither ``*`` nor ``+``:
``*`` is ``%2A`` and a space ``%20`` (MoP leaves ``*`` and writes ``+``); decoding takes ``+`` as a
space too, so names MoP made read back the same.
"""

from __future__ import annotations

import string
import urllib.parse

from magnetar.protocol.topic_name import InvalidTopicName, TopicName

PERSISTENT = "persistent://"
NON_PERSISTENT = "non-persistent://"
_SAFE = frozenset((string.ascii_letters + string.digits + ".-_").encode())


def encode_name(name: str) -> str:
    """``name`` URL-encoded as Java's URLEncoder does (but ``*`` and space, see above)."""
    return "".join(chr(byte) if byte in _SAFE else f"%{byte:02X}" for byte in name.encode("utf-8"))


def decode_name(local_name: str) -> str:
    """A topic's local name as an MQTT name (``%XX`` and ``+`` decoded, as URLDecoder does)."""
    return urllib.parse.unquote_plus(local_name, errors="strict")


def pulsar_topic(mqtt_name: str, tenant: str, namespace: str) -> TopicName:
    """The Pulsar topic an MQTT Topic Name is published to; InvalidTopicName if it makes none."""
    for domain in (PERSISTENT, NON_PERSISTENT):
        if mqtt_name.startswith(domain):
            tenant_part, _, rest = mqtt_name[len(domain) :].partition("/")
            namespace_part, slash, local = rest.partition("/")
            if not slash or not local:
                raise InvalidTopicName(f"{mqtt_name!r} must be {domain}tenant/namespace/name")
            return TopicName.parse(f"{domain}{tenant_part}/{namespace_part}/{encode_name(local)}")
    return TopicName.parse(f"{PERSISTENT}{tenant}/{namespace}/{encode_name(mqtt_name)}")


def namespace_of_filter(topic_filter: str, tenant: str, namespace: str) -> tuple[str, str, str]:
    """The domain prefix, namespace (``tenant/namespace``) and local part of a Topic Filter: one
    that starts with ``persistent://t/ns/`` filters that namespace's topics, others the default's."""
    for domain in (PERSISTENT, NON_PERSISTENT):
        if topic_filter.startswith(domain):
            tenant_part, _, rest = topic_filter[len(domain) :].partition("/")
            namespace_part, _, local = rest.partition("/")
            return domain, f"{tenant_part}/{namespace_part}", local
    return "", f"{tenant}/{namespace}", topic_filter


def mqtt_topic(topic: TopicName, prefixed: bool) -> str:
    """The Topic Name an MQTT subscriber is sent ``topic``'s messages under: the decoded local name,
    after ``persistent://tenant/namespace/`` when its filter named the namespace (``prefixed``)."""
    local = decode_name(topic.local_name)
    if prefixed:
        return f"{topic.domain}://{topic.tenant}/{topic.namespace}/{local}"
    return local
