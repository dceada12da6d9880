"""Behaviour checks against Mosquitto (Debian's ``mosquitto``, the usual anchor): the same clients
doing the same things get the same answers from Magnetar."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from paho.mqtt.client import topic_matches_sub

from magnetar.protocol.mqtt import MQTT_3_1_1, MQTT_5, ConnAck

from ..waiting import eventually
from .mqtt_support import PahoClient, RawClient

MOSQUITTO = shutil.which("mosquitto") or shutil.which("mosquitto", path="/usr/sbin")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def mosquitto(tmp_path: Path):
    if MOSQUITTO is None:
        pytest.skip("mosquitto is not installed (.ci/system-packages installs it)")
    port = _free_port()
    config = tmp_path / "mosquitto.conf"
    config.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\n")
    proc = subprocess.Popen(
        [MOSQUITTO, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:

        def listening() -> bool:
            with socket.socket() as sock:
                return sock.connect_ex(("127.0.0.1", port)) == 0

        eventually(listening, what="mosquitto listening")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


FILTERS = ["w/+/t", "w/#", "+/x", "#", "w/+"]
TOPICS = ["w/a/t", "w/b/c/t", "w", "q/x", "$dollar/x", "w/a"]
#: Published last, on Mosquitto: one of them reaches each filter, after everything before it.
MARKERS = {"w/+/t": "w/end/t", "w/#": "w/end/t", "+/x": "end/x", "#": "end/x", "w/+": "w/end"}
#: In this order each filter's marker is the last message it matches: once a subscriber has its
#: marker, it has everything (Mosquitto keeps a subscriber's order). Published in another order
#: ("end/x" first), "#" would have its marker before "w/end" and "w/end/t" reached it, and a
#: snapshot taken then would leave them out of what Mosquitto delivers.
PUBLISHED = [*TOPICS, "w/end", "w/end/t", "end/x"]


def _markers_close_each_run() -> bool:
    """Checked with paho's own matcher, not the broker's: nothing after a filter's marker matches it."""
    return all(
        not any(topic_matches_sub(f, t) for t in PUBLISHED[PUBLISHED.index(marker) + 1 :])
        for f, marker in MARKERS.items()
    )


def deliveries(port: int, version: int, tag: str, done) -> set[tuple[str, str]]:
    """(filter, topic) for each message a subscriber of each filter got, once ``done`` of them."""
    subscribers = {f: PahoClient(port, f"{tag}-sub-{i}", version) for i, f in enumerate(FILTERS)}
    publisher = PahoClient(port, f"{tag}-pub", version)

    def got() -> set[tuple[str, str]]:
        return {(f, m[0]) for f, c in subscribers.items() for m in c.received.messages}

    try:
        for topic_filter, client in subscribers.items():
            assert client.subscribe(topic_filter, 1) == [1]
        for topic in PUBLISHED:
            publisher.publish(topic, topic.encode(), 1)
        eventually(lambda: done(got()), what=f"the deliveries on {tag}")
        return got()
    finally:
        for client in (*subscribers.values(), publisher):
            client.close()


@pytest.mark.slow
@pytest.mark.parametrize("version", [MQTT_3_1_1, MQTT_5], ids=["3.1.1", "5.0"])
def test_wildcard_deliveries_are_mosquittos(broker_factory, mosquitto, version):
    """Mosquitto delivers in publish order, so its markers close its run; Magnetar's topics are
    separate Pulsar topics (no order across them), so its run ends when it got the same set, and
    anything more or less fails it."""
    assert _markers_close_each_run()
    expected = deliveries(mosquitto, version, "q", lambda seen: set(MARKERS.items()) <= seen)
    magnetar = broker_factory({"mqtt_port": 0})
    assert deliveries(magnetar.mqtt_port, version, "m", lambda seen: seen == expected) == expected
    assert ("#", "$dollar/x") not in expected and ("+/x", "q/x") in expected


def test_an_unsupported_protocol_level_is_answered_as_mosquitto_does(broker_factory, mosquitto):
    magnetar = broker_factory({"mqtt_port": 0})
    answers = []
    for port in (magnetar.mqtt_port, mosquitto):
        raw = RawClient(port, MQTT_3_1_1)
        raw.send_bytes(b"\x10\x0c\x00\x04MQTT\x06\x02\x00\x3c\x00\x00")  # level 6
        answers.append(raw.closed_after())
        raw.close()
    assert answers[0] == answers[1] == [ConnAck(False, 1)]
