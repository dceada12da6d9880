"""``BrokerProcess`` (magnetar.broker_process): a restart gets its ports back, and a start that
fails says how the process ended and what it wrote."""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import urllib.request

import pulsar
import pytest

from magnetar.broker_process import HOLDS_PORTS, BrokerProcess, BrokerProcessError, exit_status
from tests.interop.tls_certs import make_tls_files, tls_settings


def taken_by_another_program(port: int) -> bool:
    """Whether a program binding ``port`` now (as one handed it by the OS would) is refused."""
    with socket.socket() as other:
        try:
            other.bind(("127.0.0.1", port))
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE, exc
            return True
    return False


@pytest.mark.slow
@pytest.mark.skipif(not HOLDS_PORTS, reason="ports are held for a restart on Linux only")
@pytest.mark.parametrize("end", ["kill -9", "SIGTERM"])
def test_the_ports_of_a_broker_that_ended_are_kept_for_its_restart(tmp_path, end):
    """Between a kill -9 (or a stop) and the restart no other program is given the broker's ports;
    without that, one that is (it happened in CI) makes the restart exit 1: "Address already in use"."""
    broker = BrokerProcess(tmp_path).start()
    try:
        ports = (broker.port, broker.http_port)
        if end == "kill -9":
            broker.kill()
        else:
            broker.stop()
        assert all(taken_by_another_program(port) for port in ports if port is not None)
        broker.restart()
        assert (broker.port, broker.http_port) == ports
    finally:
        broker.close()
    assert not any(taken_by_another_program(port) for port in ports if port is not None)  # let go


@pytest.mark.slow
@pytest.mark.skipif(not HOLDS_PORTS, reason="ports are held for a restart on Linux only")
def test_a_restarted_broker_with_mqtt_gets_its_mqtt_ports_back(tmp_path):
    """MQTT on free ports (mqtt_port and mqtts_port 0 in the config): after a kill -9 the two ports
    are held as the binary and HTTP ports are, and the restart serves MQTT on them again (the
    config alone would have the OS pick two new ones), so a client reconnects where it was."""
    settings = {"mqtt_port": 0, **tls_settings(make_tls_files(tmp_path / "tls"), mqtts_port=0)}
    broker = BrokerProcess(tmp_path / "broker", settings).start()
    try:
        mqtt_ports = (broker.mqtt_port, broker.mqtts_port)
        assert None not in mqtt_ports
        broker.kill()
        assert all(taken_by_another_program(port) for port in mqtt_ports)
        broker.restart()
        assert (broker.mqtt_port, broker.mqtts_port) == mqtt_ports
        with socket.create_connection(("127.0.0.1", broker.mqtt_port), timeout=10) as mqtt:
            mqtt.sendall(CONNECT)
            assert mqtt.recv(4) == CONNACK_ACCEPTED
    finally:
        broker.close()
    assert not any(taken_by_another_program(port) for port in mqtt_ports)  # let go


@pytest.mark.slow
@pytest.mark.skipif(not HOLDS_PORTS, reason="ports are held for a restart on Linux only")
def test_a_restarted_tls_broker_gets_its_tls_ports_back(tmp_path):
    """pulsar+ssl:// and HTTPS on free ports (broker_service_port_tls and web_service_port_tls 0 in
    the config): after a kill -9 both are held as the plain ports are, and the restart serves TLS
    on them again (the config alone would have the OS pick two new ones), so the URLs clients
    were given still work."""
    files = make_tls_files(tmp_path / "tls")
    broker = BrokerProcess(tmp_path / "broker", tls_settings(files)).start()
    try:
        tls_ports = (broker.tls_port, broker.https_port)
        assert None not in tls_ports
        urls = (broker.service_url_tls, broker.https_url)
        broker.kill()
        assert all(taken_by_another_program(port) for port in tls_ports)
        broker.restart()
        assert (broker.tls_port, broker.https_port) == tls_ports
        context = ssl.create_default_context(cafile=files.ca)
        with urllib.request.urlopen(f"{urls[1]}/admin/v2/clusters", timeout=10, context=context) as answer:
            assert answer.status == 200
        client = pulsar.Client(
            urls[0], tls_trust_certs_file_path=str(files.ca), operation_timeout_seconds=10, logger=LOGGER
        )
        try:
            producer = client.create_producer("persistent://public/default/tls-ports-back")
            producer.send(b"after the restart")  # receipted: stored by the restarted broker
        finally:
            client.close()
    finally:
        broker.close()
    assert not any(taken_by_another_program(port) for port in tls_ports)  # let go


#: The official client's log, warnings and worse only.
LOGGER = logging.getLogger("pulsar-client")
LOGGER.setLevel(logging.WARNING)


#: MQTT 3.1.1 CONNECT (clean session, keep-alive 60 s, client id "r") and the CONNACK accepting it.
CONNECT = b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01r"
CONNACK_ACCEPTED = b"\x20\x02\x00\x00"


def test_a_broker_that_exits_silently_says_so(tmp_path):
    """A process that ends before listening without a word: the message says its status and that
    its stdout and stderr were empty, not an empty tail."""
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\nexit 1\n")
    silent.chmod(0o755)
    broker = BrokerProcess(tmp_path, python=str(silent))
    with pytest.raises(BrokerProcessError) as info:
        broker.start(timeout=30)
    message = str(info.value)
    assert "exited with 1 before listening" in message
    assert f"it wrote nothing on stdout or stderr ({tmp_path / 'broker.log'} is empty)" in message


def test_a_broker_that_cannot_start_names_its_log_and_reason(tmp_path):
    failing = tmp_path / "failing-python"
    failing.write_text("#!/bin/sh\necho 'ERROR magnetar: cannot start: the port is taken' >&2\nexit 1\n")
    failing.chmod(0o755)
    broker = BrokerProcess(tmp_path, python=str(failing))
    with pytest.raises(BrokerProcessError) as info:
        broker.start(timeout=30)
    assert info.value.reason == "the port is taken"
    assert f"its stdout and stderr ({tmp_path / 'broker.log'}) end:\n" in str(info.value)


def test_exit_status_names_the_signal():
    assert exit_status(1) == "exited with 1"
    assert exit_status(-9) == "was killed by SIGKILL"
    assert exit_status(-200) == "was killed by signal 200"
