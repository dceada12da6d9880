"""The damage rule and the reference detector, as pure functions."""

from __future__ import annotations

import pytest

from magnetar.demo.smart_city.city import build_city
from magnetar.demo.smart_city.detection import Alert, DamageRule, reference_alerts, window_start
from magnetar.demo.smart_city.settings import CitySettings

W = 5000
T0 = 1_700_000_000_000  # a multiple of W


def sensor(ts, vibration, area="a"):
    return {"kind": "sensor", "device": "s1", "area": area, "ts": ts, "vibration": vibration}


def camera(ts, damage, area="a"):
    return {"kind": "camera", "device": "c1", "area": area, "ts": ts, "damage": damage}


def vehicle(ts, speed, device="v1", area="a"):
    return {"kind": "vehicle", "device": device, "area": area, "ts": ts, "speed_kmh": speed}


def test_rule_needs_both_vibration_hits_and_camera_flags():
    rule = DamageRule(vibration_threshold=3.0, min_vibration_hits=2, min_camera_flags=1)
    assert rule.matches(2, 1)
    assert not rule.matches(1, 5)
    assert not rule.matches(10, 0)
    assert rule.is_hit(3.0) and not rule.is_hit(2.99) and not rule.is_hit(None)


def test_rule_refuses_to_match_everything():
    with pytest.raises(ValueError):
        DamageRule(min_vibration_hits=0, min_camera_flags=0)


def test_trigger_is_when_the_rule_became_true():
    rule = DamageRule(min_vibration_hits=2, min_camera_flags=1)
    assert rule.trigger_ms([300, 100, 200], [50]) == 200  # second hit, after the flag
    assert rule.trigger_ms([100, 200], [900, 400]) == 400  # first flag, after two hits
    assert DamageRule(min_vibration_hits=0, min_camera_flags=2).trigger_ms([], [7, 3, 9]) == 7


def test_windows_are_cut_at_multiples_of_their_length():
    assert window_start(T0 + 4999, W) == T0
    assert window_start(T0 + 5000, W) == T0 + W


def test_reference_alerts_one_per_matching_window():
    rule = DamageRule()
    records = [
        sensor(T0 + 100, 4.0),
        sensor(T0 + 900, 5.0),
        camera(T0 + 1500, True),
        vehicle(T0 + 200, 20.0),
        vehicle(T0 + 300, 30.0, device="v2"),
        # Next window: hits but no camera flag.
        sensor(T0 + W + 1, 6.0),
        sensor(T0 + W + 2, 6.0),
        camera(T0 + W + 3, False),
        # Another area: a flag and one hit only.
        sensor(T0 + 10, 9.0, area="b"),
        camera(T0 + 20, True, area="b"),
        {"kind": "tick", "device": "clock", "area": "", "ts": T0 + 99 * W},
    ]
    (alert,) = reference_alerts(records, rule, W)
    assert alert == Alert(
        area="a",
        window_start_ms=T0,
        window_end_ms=T0 + W,
        trigger_ms=T0 + 1500,
        vibration_hits=2,
        camera_flags=1,
        max_vibration=5.0,
        vehicles=2,
        avg_speed_kmh=25.0,
    )
    assert alert.alert_id == f"a/{T0}"
    assert Alert.from_json(alert.to_json()) == alert


def test_a_flagged_frame_counts_as_a_camera_flag():
    frame = {"kind": "frame", "device": "c1", "area": "a", "ts": T0 + 10, "damage": True}
    records = [sensor(T0 + 100, 4.0), sensor(T0 + 200, 4.0), frame]
    (alert,) = reference_alerts(records, DamageRule(), W)
    assert alert.camera_flags == 1 and alert.trigger_ms == T0 + 200
    assert not reference_alerts([*records[:2], {**frame, "damage": False}], DamageRule(), W)


def test_the_planned_city_alerts_in_damaged_areas_only():
    settings = CitySettings(seed=11, areas=5, damaged_areas=2, duration_s=60, damage_start_s=20)
    city = build_city(settings)
    records = [r.record(T0 + 1234) for r in city.readings]
    rule = DamageRule(settings.vibration_threshold, settings.min_vibration_hits, settings.min_camera_flags)
    alerts = reference_alerts(records, rule, settings.window_ms)
    assert {a.area for a in alerts} == set(city.damaged)
    for alert in alerts:
        assert alert.window_end_ms > T0 + 1234 + settings.damage_start_s * 1000
        assert alert.window_start_ms <= alert.trigger_ms < alert.window_end_ms
    # Most windows after the damage starts raise one.
    windows_after = (settings.duration_s - settings.damage_start_s) / settings.window_s
    assert len(alerts) >= 0.7 * windows_after * len(city.damaged)
