"""``--districts``' pure parts: areas dealt to districts, exactly-once counting, a district's verdict."""

from __future__ import annotations

import dataclasses

from magnetar.demo.smart_city.districts import Arrivals, DistrictReport, Lag, districts_of_areas


def test_areas_are_dealt_to_the_districts_in_turn():
    areas = [f"area-{i}" for i in range(1, 6)]
    assert districts_of_areas(areas, 2) == {
        "area-1": "district-1",
        "area-2": "district-2",
        "area-3": "district-1",
        "area-4": "district-2",
        "area-5": "district-1",
    }
    assert set(districts_of_areas(areas, 5).values()) == {f"district-{i}" for i in range(1, 6)}


def test_arrivals_count_stored_duplicates_but_not_redeliveries():
    arrivals = Arrivals()
    arrivals.add("district-1", (0, 1, 1, 0), ("sensor", "s-1", 100))
    arrivals.add("district-1", (0, 1, 1, 0), ("sensor", "s-1", 100))  # redelivered: same message
    arrivals.add("district-1", (0, 1, 2, 0), ("sensor", "s-1", 200))
    assert (arrivals.total("district-1"), arrivals.unique("district-1")) == (2, 2)
    arrivals.add("district-1", (1, 1, 7, 0), ("sensor", "s-1", 100))  # stored twice: a duplicate
    assert (arrivals.total("district-1"), arrivals.unique("district-1")) == (3, 2)
    assert (arrivals.total("district-2"), arrivals.unique("district-2")) == (0, 0)


def test_a_district_passes_only_exactly_once_drained_and_with_every_alert_back():
    good = DistrictReport(
        name="district-1",
        areas=["area-1"],
        produced=10,
        received_total=10,
        received_unique=10,
        lag=Lag(3, 0.2, 0.5, 0),
        alerts_expected=2,
        alerts_back=2,
        vehicles_missing=0,
    )
    assert good.ok and good.exactly_once
    text = "\n".join(good.lines())
    assert "10 unique of 10 received at central (exactly once)" in text
    assert "replicationBacklog 3" in text and "drained within 0.50 s" in text
    assert not dataclasses.replace(good, received_total=11).ok  # a duplicate
    assert not dataclasses.replace(good, received_total=9, received_unique=9).ok  # a loss
    assert not dataclasses.replace(good, lag=Lag(3, 0.2, None, 3)).ok
    assert "NOT drained (3 left)" in "\n".join(dataclasses.replace(good, lag=Lag(3, 0.2, None, 3)).lines())
    assert not dataclasses.replace(good, alerts_back=1).ok
    assert not dataclasses.replace(good, vehicles_missing=1).ok
