"""Topic names as clients write them, and as the broker wants them."""

from __future__ import annotations

PARTITION_SUFFIX = "-partition-"


def full_topic_name(topic: str) -> str:
    """``my-topic`` -> ``persistent://public/default/my-topic``; ``t/ns/x`` -> ``persistent://t/ns/x``."""
    if "://" in topic:
        return topic
    parts = topic.split("/")
    if len(parts) == 1:
        return f"persistent://public/default/{topic}"
    if len(parts) == 3:
        return f"persistent://{topic}"
    raise ValueError(f"invalid topic name {topic!r}: use 'name', 'tenant/namespace/name' or a full name")


def partition_name(topic: str, index: int) -> str:
    return f"{topic}{PARTITION_SUFFIX}{index}"


def is_persistent(topic: str) -> bool:
    return full_topic_name(topic).startswith("persistent://")


#: Service URL schemes, and whether they mean TLS.
SCHEMES = {"pulsar": False, "magnetar": False, "pulsar+ssl": True}


def is_tls_url(service_url: str) -> bool:
    """Whether ``service_url`` asks for TLS (``pulsar+ssl://``)."""
    return SCHEMES.get(service_url.partition("://")[0], False)


def parse_service_url(service_url: str) -> list[tuple[str, int]]:
    """``pulsar://h1:6650,h2:6651`` -> [("h1", 6650), ("h2", 6651)]; ``pulsar+ssl://h`` -> [("h", 6651)]."""
    scheme, sep, rest = service_url.partition("://")
    if not sep or scheme not in SCHEMES:
        raise ValueError(
            f"unsupported service URL {service_url!r}: expected pulsar://host:port or pulsar+ssl://host:port"
        )
    hosts = []
    for item in rest.rstrip("/").split(","):
        host, _, port = item.rpartition(":")
        if not host:
            host, port = item, "6651" if SCHEMES[scheme] else "6650"
        hosts.append((host.strip("[]"), int(port)))
    return hosts
