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
