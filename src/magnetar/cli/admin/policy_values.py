"""Sizes and durations as pulsar-admin reads them in policy flags (``-s 10G``, ``-t 3h``), to the
numbers the admin API takes. Pure functions, tested without a broker.
"""

from __future__ import annotations

import click

_SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_size(text: str) -> int:
    """Bytes in ``text``: a number of bytes, or with a unit ``K``, ``M``, ``G``, ``T`` (powers of
    1024); ``-1`` means no limit. ValueError otherwise."""
    text = text.strip()
    if text == "-1":
        return -1
    number, unit = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "")
    if (unit and unit not in _SIZE_UNITS) or not number.isdigit():
        raise ValueError(f"{text!r} is not a size: a number of bytes, or with K, M, G or T; -1 for no limit")
    return int(number) * _SIZE_UNITS.get(unit, 1)


def parse_duration(text: str) -> int:
    """Seconds in ``text``: a number of seconds, or with a unit ``s``, ``m``, ``h``, ``d``, ``w``,
    ``y``; ``-1`` means no limit. ValueError otherwise."""
    text = text.strip()
    if text == "-1":
        return -1
    number, unit = (text[:-1], text[-1].lower()) if text[-1:].isalpha() else (text, "s")
    if unit not in _TIME_UNITS or not number.isdigit():
        raise ValueError(f"{text!r} is not a duration: seconds, or with s, m, h, d, w or y; -1 for no limit")
    return int(number) * _TIME_UNITS[unit]


def size_in_mb(size: int) -> int:
    """Whole MiB of ``size`` bytes (-1 stays -1), as pulsar-admin's set-retention sends it."""
    return -1 if size < 0 else size // 1024**2


def minutes_of(seconds: int) -> int:
    """Whole minutes of ``seconds`` (-1 stays -1), as pulsar-admin's set-retention sends them."""
    return -1 if seconds < 0 else seconds // 60


class Size(click.ParamType):
    """A click type for ``parse_size``: the value in bytes."""

    name = "SIZE"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Duration(click.ParamType):
    """A click type for ``parse_duration``: the value in seconds."""

    name = "DURATION"

    def convert(self, value, param, ctx) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


SIZE = Size()
DURATION = Duration()
