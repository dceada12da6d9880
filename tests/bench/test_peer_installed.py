"""The peer broker is installed with the test dependencies, so the smoke runs cover the
side-by-side path (Magnetar and ``pulsar-lite`` with the same official client) they claim to.

Locally, without the peer, this skips; under ``CI=true`` that skip fails the run.
"""

from __future__ import annotations

import subprocess

import pytest

from bench.brokers import peer_binary, peer_installed


def test_the_peer_broker_is_installed_and_starts():
    if not peer_installed():
        pytest.skip("pulsar-lite is not installed: the bench smoke tests run Magnetar alone")
    done = subprocess.run([peer_binary(), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "compatible with Apache Pulsar" in done.stdout
