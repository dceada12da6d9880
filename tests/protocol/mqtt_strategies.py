"""Hypothesis strategies for valid MQTT packets of each protocol level (round-trip tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from magnetar.protocol.mqtt import (
    MQTT_5,
    Auth,
    ConnAck,
    Connect,
    Disconnect,
    PingReq,
    PingResp,
    Properties,
    PubAck,
    PubComp,
    Publish,
    PubRec,
    PubRel,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
)
from magnetar.protocol.mqtt.codes import ALLOWED_REASONS, PacketType
from magnetar.protocol.mqtt.properties import SPECS, WILL, Kind

# MQTT strings: UTF-8 without U+0000 and surrogates, short enough to keep examples fast.
text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
level_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00/+#"), min_size=1, max_size=6
)
topic_name = st.lists(level_text | st.just(""), min_size=1, max_size=4).map("/".join).filter(bool)
topic_filter = st.lists(level_text | st.just("+"), min_size=1, max_size=4).flatmap(
    lambda levels: st.sampled_from(["/".join(levels), "/".join([*levels, "#"]), "#"])
)
packet_id = st.integers(1, 65535)
_VALUES = {
    Kind.BYTE: st.integers(0, 1),
    Kind.U16: st.integers(1, 65535),
    Kind.U32: st.integers(1, 2**32 - 1),
    Kind.VARINT: st.integers(1, 268_435_455),
    Kind.UTF8: text,
    Kind.BINARY: st.binary(max_size=16),
    Kind.PAIR: st.tuples(text, text),
}


def properties(where: PacketType | str, version: int) -> st.SearchStrategy[Properties]:
    """Properties valid in ``where``; none for 3.1.1."""
    if version != MQTT_5:
        return st.just(Properties())
    fields = {}
    for spec in SPECS:
        if where not in spec.packets:
            continue
        value = _VALUES[spec.kind]
        if spec.name == "user_properties" or (
            spec.name == "subscription_identifiers" and where == PacketType.PUBLISH
        ):
            fields[spec.name] = st.lists(value, max_size=3).map(tuple)
        elif spec.name == "subscription_identifiers":
            fields[spec.name] = st.lists(value, max_size=1).map(tuple)
        else:
            fields[spec.name] = st.none() | value
    return st.fixed_dictionaries({}, optional=fields).map(lambda given: Properties(**given))


def _reason(kind: PacketType, version: int) -> st.SearchStrategy[int]:
    return st.sampled_from(sorted(ALLOWED_REASONS[kind])) if version == MQTT_5 else st.just(0)


def packets(version: int, connect: bool = True) -> st.SearchStrategy:
    """Any packet valid in ``version``, as either side sends it (CONNECT only with ``connect``)."""
    choices = list(packet_kinds(version).values())
    return st.one_of(choices if connect else choices[1:])


def packet_kinds(version: int) -> dict[str, st.SearchStrategy]:
    """A strategy per packet type valid in ``version``, CONNECT first."""
    qos = st.integers(0, 2)
    will = st.builds(Will, topic_name, st.binary(max_size=32), qos, st.booleans(), properties(WILL, version))
    connect = st.builds(
        Connect,
        text,
        st.just(version),
        st.booleans(),
        st.integers(0, 65535),
        st.none() | text,
        st.none() | st.binary(max_size=16),
        st.none() | will,
        properties(PacketType.CONNECT, version),
    )
    if version != MQTT_5:  # 3.1.1: no password without a user name
        connect = connect.filter(lambda c: c.password is None or c.username is not None)
    connack_code = _reason(PacketType.CONNACK, version) if version == MQTT_5 else st.integers(0, 5)
    connack = st.builds(ConnAck, st.booleans(), connack_code, properties(PacketType.CONNACK, version))

    def publish(qos_: int) -> st.SearchStrategy[Publish]:
        return st.builds(
            Publish,
            topic_name,
            st.binary(max_size=64),
            st.just(qos_),
            st.booleans(),
            st.booleans() if qos_ else st.just(False),
            packet_id if qos_ else st.none(),
            properties(PacketType.PUBLISH, version),
        )

    def ack(cls, kind: PacketType):
        return st.builds(cls, packet_id, _reason(kind, version), properties(kind, version))

    if version == MQTT_5:
        subscription = st.builds(
            Subscription, topic_filter, qos, st.booleans(), st.booleans(), st.integers(0, 2)
        )
        suback_code = st.sampled_from(sorted(ALLOWED_REASONS[PacketType.SUBACK]))
        unsuback_codes = st.lists(_reason(PacketType.UNSUBACK, version), min_size=1, max_size=3)
    else:
        subscription = st.builds(Subscription, topic_filter, qos)
        suback_code = st.sampled_from([0, 1, 2, 0x80])
        unsuback_codes = st.just([])
    choices = [
        connect,
        connack,
        publish(0),
        publish(1),
        publish(2),
        ack(PubAck, PacketType.PUBACK),
        ack(PubRec, PacketType.PUBREC),
        ack(PubRel, PacketType.PUBREL),
        ack(PubComp, PacketType.PUBCOMP),
        st.builds(
            Subscribe,
            packet_id,
            st.lists(subscription, min_size=1, max_size=3).map(tuple),
            properties(PacketType.SUBSCRIBE, version),
        ),
        st.builds(
            SubAck,
            packet_id,
            st.lists(suback_code, max_size=3).map(tuple),
            properties(PacketType.SUBACK, version),
        ),
        st.builds(
            Unsubscribe,
            packet_id,
            st.lists(topic_filter, min_size=1, max_size=3).map(tuple),
            properties(PacketType.UNSUBSCRIBE, version),
        ),
        st.builds(UnsubAck, packet_id, unsuback_codes.map(tuple), properties(PacketType.UNSUBACK, version)),
        st.just(PingReq()),
        st.just(PingResp()),
        st.builds(
            Disconnect, _reason(PacketType.DISCONNECT, version), properties(PacketType.DISCONNECT, version)
        ),
    ]
    if version == MQTT_5:
        choices.append(
            st.builds(Auth, _reason(PacketType.AUTH, version), properties(PacketType.AUTH, version))
        )
    return {strategy_name: strategy for strategy_name, strategy in zip(_NAMES, choices, strict=False)}


_NAMES = ("connect", "connack", "publish0", "publish1", "publish2", "puback", "pubrec", "pubrel", "pubcomp")
_NAMES += ("subscribe", "suback", "unsubscribe", "unsuback", "pingreq", "pingresp", "disconnect", "auth")
