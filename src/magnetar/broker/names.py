"""Limits on the names clients give: producer, subscription and consumer names.

Pulsar sets no length limit on names (apache/pulsar#12023); Magnetar does, so that one request
cannot make the broker store, log and hand out a name of megabytes (a subscription's name is
kept in the metadata store and shown in every stats answer). Topic names have their own limit,
``topic_name.MAX_TOPIC_NAME_LENGTH``. Names that are not valid UTF-8 are refused before a
handler sees them (``protocol.text``).
"""

from __future__ import annotations

from magnetar.broker.errors import NotAllowed

#: Longest producer, subscription or consumer name, in characters.
MAX_NAME_LENGTH = 1024


class InvalidName(NotAllowed, ValueError):
    """A name the broker refuses: ``NotAllowedError`` on the binary protocol, 400 on the admin API."""


def check_name(name: str, what: str) -> None:
    """Raise InvalidName for a ``what`` name that is not text or is longer than MAX_NAME_LENGTH."""
    if not isinstance(name, str):
        raise InvalidName(f"{what} is not valid UTF-8")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidName(f"{what} of {len(name)} characters exceeds the limit of {MAX_NAME_LENGTH}")
