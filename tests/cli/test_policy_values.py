"""pulsar-admin's sizes and durations read by ``magnetar admin`` policy flags."""

from __future__ import annotations

import pytest

from magnetar.cli.admin.policy_values import minutes_of, parse_duration, parse_size, size_in_mb


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100", 100),
        ("10K", 10 * 1024),
        ("10m", 10 * 1024**2),
        ("2G", 2 * 1024**3),
        ("1t", 1024**4),
        ("-1", -1),
    ],
)
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("45", 45), ("45s", 45), ("30m", 1800), ("3h", 10800), ("2d", 172800), ("1w", 604800), ("-1", -1)],
)
def test_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "G", "10X", "1.5G", "-2", "ten"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)


@pytest.mark.parametrize("text", ["", "h", "10q", "1.5h", "-5", "soon"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_retention_units_as_pulsar_admin_sends_them():
    assert size_in_mb(parse_size("10G")) == 10 * 1024
    assert size_in_mb(parse_size("100")) == 0
    assert size_in_mb(-1) == -1
    assert minutes_of(parse_duration("3h")) == 180
    assert minutes_of(-1) == -1
