"""The city plan: the same seed plays the same city; ground truth as documented."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from magnetar.demo.smart_city.city import CAMERA, SENSOR, VEHICLE, build_city
from magnetar.demo.smart_city.settings import MIB, CitySettings

SMALL = CitySettings(
    areas=4, damaged_areas=1, vehicles_per_area=3, duration_s=30, damage_start_s=10, frames=4
)


def test_same_seed_same_city():
    assert build_city(SMALL) == build_city(SMALL)
    a, b = build_city(SMALL).frames[0], build_city(SMALL).frames[0]
    assert a.content() == b.content()


def test_another_seed_another_city():
    other = build_city(dataclasses.replace(SMALL, seed=SMALL.seed + 1))
    assert other.readings != build_city(SMALL).readings


def test_devices_and_reading_counts():
    city = build_city(SMALL)
    assert len(city.devices_of(VEHICLE)) == 12
    assert len(city.devices_of(SENSOR)) == 4 * SMALL.sensors_per_area
    assert len(city.devices_of(CAMERA)) == 4 * SMALL.cameras_per_area
    per_vehicle = SMALL.duration_s / SMALL.vehicle_period_s
    assert sum(r.kind == VEHICLE for r in city.readings) == 12 * per_vehicle
    assert len(city.damaged) == 1 and set(city.clean) == set(city.areas) - city.damaged


def test_readings_are_sent_in_order_with_bounded_lateness():
    city = build_city(SMALL)
    sends = [r.send_ms for r in city.readings]
    assert sends == sorted(sends)
    lateness = [r.send_ms - r.event_ms for r in city.readings]
    assert min(lateness) >= 0 and max(lateness) <= SMALL.max_lateness_s * 1000
    # Event times do arrive out of order.
    events = [r.event_ms for r in city.readings]
    assert events != sorted(events)


def test_damage_shows_only_in_damaged_areas_after_it_starts():
    city = build_city(SMALL)
    start = SMALL.damage_start_s * 1000
    threshold = SMALL.vibration_threshold
    for r in city.readings:
        if r.kind != SENSOR or r.vibration < threshold:
            continue
        if not (r.area in city.damaged and r.event_ms >= start):
            # A truck spike: only an area's first sensor, never two in one window.
            assert r.device.endswith("-1")
    damaged_flags = [r for r in city.readings if r.kind == CAMERA and r.damage and r.area in city.damaged]
    assert any(r.event_ms >= start for r in damaged_flags)


def test_spikes_outside_damage_are_more_than_a_window_apart():
    city = build_city(dataclasses.replace(SMALL, duration_s=300))
    start = SMALL.damage_start_s * 1000
    for area in city.areas:
        spikes = [
            r.event_ms
            for r in city.readings
            if r.area == area
            and r.kind == SENSOR
            and r.vibration >= SMALL.vibration_threshold
            and not (area in city.damaged and r.event_ms >= start)
        ]
        assert all(b - a > SMALL.window_ms for a, b in itertools.pairwise(spikes))


def test_frames_are_large_spread_out_and_flagged_by_ground_truth():
    settings = dataclasses.replace(SMALL, frame_min_bytes=5 * MIB + 1, frame_max_bytes=6 * MIB)
    city = build_city(settings)
    assert len(city.frames) == 4
    for frame in city.frames:
        assert 5 * MIB < frame.size <= 6 * MIB
        assert frame.damage == (
            frame.area in city.damaged and frame.send_ms >= settings.damage_start_s * 1000
        )
    content = city.frames[0].content()
    props = city.frames[0].properties(content)
    assert props["size"] == str(len(content)) and len(props["sha256"]) == 64


def test_settings_refuse_lateness_beyond_the_watermark():
    with pytest.raises(ValueError, match="watermark"):
        CitySettings(max_lateness_s=3, watermark_s=2).validate()


def test_settings_refuse_a_broker_of_no_worker():
    with pytest.raises(ValueError, match="workers"):
        CitySettings(workers=0).validate()
    CitySettings(workers=2).validate()
