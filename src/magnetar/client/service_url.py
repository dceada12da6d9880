"""Service URLs as clients write them: ``pulsar://host:port[,host:port]`` or ``pulsar+ssl://...``."""

from __future__ import annotations

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
