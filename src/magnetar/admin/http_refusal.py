"""The HTTP port's answer to a connection it accepted only to refuse (no file descriptor left):
503 with Pulsar's JSON body ``{"reason": ...}``, once the request is read whole (refusal.py says why)."""

from __future__ import annotations

import json
import re

from magnetar.broker.descriptors import NO_NEW_CONNECTIONS
from magnetar.broker.refusal import Answer

_CONTENT_LENGTH = re.compile(rb"^content-length:[ \t]*(\d+)", re.IGNORECASE | re.MULTILINE)


def request_complete(data: bytes) -> bool:
    """The request line, the headers and the body its Content-Length announces are in."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return False
    length = _CONTENT_LENGTH.search(data, 0, end)
    return length is None or len(data) >= end + 4 + int(length.group(1))


def _response(status: str, reason: str) -> bytes:
    body = json.dumps({"reason": reason}).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


OUT_OF_DESCRIPTORS = Answer(_response("503 Service Unavailable", NO_NEW_CONNECTIONS), request_complete)
