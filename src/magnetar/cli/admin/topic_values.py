"""Pure pieces of ``magnetar admin topics``: pulsar-admin's relative times in, peeked messages out.

No network here, so each is tested on its own (tests/cli/test_admin_topics.py).
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any

from magnetar.cli.formatting import parse_message_id
from magnetar.client.admin.topics import PeekedMessage, message_id_json

#: pulsar-admin's units for a relative time ("10m", "1h"...); a bare number is seconds.
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400, "y": 365 * 86_400}
_RELATIVE = re.compile(r"(\d+)([smhdwy]?)")


def relative_seconds(text: str) -> int:
    """``100``, ``30s``, ``10m``, ``3h``, ``2d``, ``5w`` or ``1y`` as seconds; ValueError otherwise."""
    match = _RELATIVE.fullmatch(text.strip().lower())
    if match is None:
        raise ValueError(f"{text!r} is not a time such as 30s, 10m, 3h, 2d, 5w, 1y or a number of seconds")
    return int(match.group(1)) * _UNIT_SECONDS[match.group(2) or "s"]


def cli_message_id(text: str) -> dict[str, int]:
    """A message id flag (``earliest``, ``latest`` or ``ledger:entry[:partition]``) as Pulsar's JSON."""
    return message_id_json(parse_message_id(text))


def _is_text(payload: bytes) -> str | None:
    """The payload as text when it is UTF-8 without control characters (tabs and newlines aside)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return None
    return text


def hex_dump(payload: bytes, width: int = 16) -> str:
    """Offset, bytes in hexadecimal and their printable ASCII, ``width`` bytes a line."""
    lines = []
    for offset in range(0, len(payload), width):
        chunk = payload[offset : offset + width]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        ascii_ = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<{width * 3 - 1}}  |{ascii_}|")
    return "\n".join(lines)


def render_peeked(message: PeekedMessage, force_hex: bool = False) -> str:
    """A peeked message for people, as pulsar-admin prints one: its id, publish time, properties,
    then the payload as text (or a hex dump when it is not text, or when asked)."""
    label = "Batch Message ID" if message.batch_index >= 0 else "Message ID"
    lines = [f"{label}: {message.message_id}"]
    if message.publish_time:
        lines.append(f"Publish time: {message.publish_time}")
    lines.append(f"Properties: {json.dumps(message.properties, ensure_ascii=False)}")
    text = None if force_hex else _is_text(message.payload)
    lines.append(hex_dump(message.payload) if text is None else text)
    return "\n".join(lines)


def peeked_record(message: PeekedMessage) -> dict[str, Any]:
    """The JSON form: ``payload`` when it is UTF-8 text, else ``payload_base64``; ``metadata`` the
    entry's ``X-Pulsar-*`` headers."""
    record: dict[str, Any] = {
        "message_id": message.message_id,
        "batch_index": message.batch_index,
        "properties": message.properties,
        "publish_time": message.publish_time,
        "metadata": message.metadata,
    }
    try:
        record["payload"] = message.payload.decode("utf-8")
    except UnicodeDecodeError:
        record["payload_base64"] = base64.b64encode(message.payload).decode("ascii")
    return record
