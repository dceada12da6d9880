"""``BrokerProcess`` (magnetar.broker_process): a restart gets its ports back, and a start that
fails says how the process ended and what it wrote."""

from __future__ import annotations

import errno
import socket

import pytest

from magnetar.broker_process import HOLDS_PORTS, BrokerProcess, BrokerProcessError, exit_status


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
