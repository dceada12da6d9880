"""``--secure``: the job runs its broker with TLS, token authentication and authorization, each
vehicle with its own role allowed to consume only its area's alerts topic; the pipeline still
delivers every alert to every vehicle of the area, a vehicle trying another area's alerts
topic is refused (AuthorizationError), and the summary says the run was secured."""

from __future__ import annotations

import dataclasses

import pytest

from tests.demo.city_runs import TWO_AREAS, listening_line, run_in
from tests.needs import need_spark

need_spark()
pytestmark = pytest.mark.spark  # Spark in this process: one xdist worker for all (tests/conftest.py)

SMALL_SECURE = dataclasses.replace(TWO_AREAS, secure=True)


@pytest.mark.timeout(240)
def test_secure_run_delivers_alerts_only_to_granted_vehicles(tmp_path):
    summary, text = run_in(SMALL_SECURE, tmp_path)

    assert summary.ok and not summary.errors, text
    assert "pulsar+ssl://127.0.0.1:" in text and "(admin https://127.0.0.1:" in text, text
    assert "secured             TLS only" in text and "token authentication, authorization" in text, text
    # The broker served TLS ports only: its listening line names no plain address.
    listening = listening_line(tmp_path)
    assert "pulsar+ssl://" in listening and "https://" in listening, listening
    assert "pulsar://" not in listening and "http://" not in listening, listening
    assert summary.refused and "AuthorizationError" in summary.refusal, text
    (damaged,) = summary.damaged_areas
    assert summary.alerts_by_area.get(damaged, 0) >= 1, text
    assert not summary.vehicles_missing_alerts and summary.receipts == summary.expected_receipts, text
    assert summary.frames_intact == summary.frames_sent == 1
    # Nothing secret is left readable by others in the work directory.
    secrets = [tmp_path / "work/secure/token-secret.key", tmp_path / "work/secure/tls/broker.key.pem"]
    assert all(p.stat().st_mode & 0o077 == 0 for p in secrets)
