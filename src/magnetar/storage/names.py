"""Turn managed-ledger names (any string) into safe, unique directory names."""

from __future__ import annotations

import hashlib
import string

_PLAIN = frozenset(string.ascii_letters + string.digits + "-_")
_MAX_LEN = 180


def encode_name(name: str) -> str:
    """Percent-encode everything but ``[A-Za-z0-9_-]`` (so no ``/``, ``.`` or ``..`` survives).

    ``persistent://public/default/t`` becomes ``persistent%3A%2F%2Fpublic%2Fdefault%2Ft``.
    Names whose encoding would pass filesystem limits keep a readable prefix and
    gain a hash of the full name. The metadata store records the directory of each
    managed ledger, so the mapping never has to be reversed.
    """
    out = []
    for ch in name:
        if ch in _PLAIN:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
    encoded = "".join(out)
    if not encoded:
        encoded = "%"
    if len(encoded) > _MAX_LEN:
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
        encoded = f"{encoded[: _MAX_LEN - 40]}~{digest}"
    return encoded


def decode_name(directory: str) -> str | None:
    """The managed-ledger name a directory was made for; None when it cannot be told.

    The reverse of ``encode_name`` for names it did not shorten: a shortened name (``~`` and a
    hash) lost its middle, and a directory that ``encode_name`` would not have made is not ours.
    """
    if "~" in directory:
        return None
    raw = bytearray()
    i = 0
    while i < len(directory):
        ch = directory[i]
        if ch == "%" and i + 3 <= len(directory):
            try:
                raw.append(int(directory[i + 1 : i + 3], 16))
            except ValueError:
                return None
            i += 3
        elif ch in _PLAIN:
            raw.append(ord(ch))
            i += 1
        else:
            return None
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return name if encode_name(name) == directory else None
