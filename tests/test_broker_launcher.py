"""Brokers forked from a launcher that has imported the broker (``magnetar.broker_launcher``), as the
suite starts them (tests/conftest.py): each is a broker process as a fresh one is, in what it holds,
where it runs, how it ends and what it says when it cannot start."""

from __future__ import annotations

import os
import signal
import subprocess

import pulsar
import pytest

from magnetar import broker_process
from magnetar.broker_launcher import LaunchedProcess, Launcher
from magnetar.broker_process import BrokerProcess, BrokerProcessError


@pytest.fixture
def launched(monkeypatch):
    """``BrokerProcess.start`` forks from the launcher in this test, whatever the suite chose."""
    monkeypatch.setattr(broker_process, "_use_launcher", True)


def descriptors(pid: int) -> list[str]:
    """What a process's descriptors are, without the inode numbers that differ between runs."""
    kinds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}")
        kinds.append(target.split("[")[0] if target.startswith(("socket:", "pipe:")) else target)
    return sorted(kinds)


def test_a_launched_broker_serves_as_a_fresh_one_and_holds_the_same_descriptors(tmp_path, monkeypatch):
    monkeypatch.setattr(broker_process, "_use_launcher", False)
    fresh = BrokerProcess(tmp_path / "fresh").start()  # a new interpreter
    monkeypatch.setattr(broker_process, "_use_launcher", True)
    forked = BrokerProcess(tmp_path / "forked").start()
    try:
        assert isinstance(forked.proc, LaunchedProcess) and isinstance(fresh.proc, subprocess.Popen)
        assert forked.proc.pid not in (os.getpid(), fresh.proc.pid)
        fresh_kinds = [k.replace(str(tmp_path / "fresh"), "DIR") for k in descriptors(fresh.proc.pid)]
        forked_kinds = [k.replace(str(tmp_path / "forked"), "DIR") for k in descriptors(forked.proc.pid)]
        assert forked_kinds == fresh_kinds  # nothing of the launcher's (its pipes) leaked into it
        assert os.readlink(f"/proc/{forked.proc.pid}/cwd") == os.getcwd()
        client = pulsar.Client(forked.service_url)
        try:
            producer = client.create_producer("persistent://public/default/launched")
            consumer = client.subscribe("persistent://public/default/launched", "s")
            producer.send(b"hello")
            assert consumer.receive(10_000).data() == b"hello"
        finally:
            client.close()
        assert "listening on" in forked.log_path.read_text()  # its stdout and stderr go to its log
    finally:
        forked.close()
        fresh.close()


def test_a_launched_process_reads_the_environment_and_directory_asked_for(tmp_path, monkeypatch):
    """What the launcher was started with does not leak into a child: the request's environment
    (a setting given as a variable) and working directory (a relative ``--config``) do."""
    (tmp_path / "broker.toml").write_text("max_open_ledger_files = 777\n")
    monkeypatch.chdir(tmp_path)
    launcher = Launcher()
    try:
        log = tmp_path / "show.log"
        env = {**os.environ, "MAGNETAR_MAX_MESSAGE_SIZE": "12345"}
        proc = launcher.launch(["config", "show", "--config", "broker.toml"], env, log)
        assert proc.wait(30) == 0, log.read_text()
        shown = log.read_text()
        assert "12345  (environment variable MAGNETAR_MAX_MESSAGE_SIZE)" in shown
        assert "777  (" in shown
        again = launcher.launch(["config", "show"], dict(os.environ), tmp_path / "again.log")
        assert again.wait(30) == 0
        assert "MAGNETAR_MAX_MESSAGE_SIZE" not in (tmp_path / "again.log").read_text()
    finally:
        launcher.close()


@pytest.mark.parametrize(("how", "code"), [("SIGTERM", 0), ("SIGKILL", -signal.SIGKILL)])
def test_a_launched_brokers_exit_status_is_as_popen_says(launched, tmp_path, how, code):
    broker = BrokerProcess(tmp_path).start()
    try:
        assert broker.running
        if how == "SIGTERM":
            assert broker.stop() == code
        else:
            broker.kill()
            assert broker.proc is not None and broker.proc.returncode == code
        assert not broker.running
        broker.restart()  # on the same ports, from the launcher again
        assert broker.running and "listening on" in broker.log_path.read_text()
    finally:
        broker.close()


def test_a_launched_broker_that_cannot_start_says_why(launched, tmp_path):
    first = BrokerProcess(tmp_path / "a").start()
    try:
        second = BrokerProcess(tmp_path / "b")
        with pytest.raises(BrokerProcessError) as info:
            second.start(port=first.port or 0)
        assert "exited with 1 before listening" in str(info.value)
        assert "Address already in use" in (info.value.reason or "")
    finally:
        first.close()


def test_the_launcher_ends_when_its_parent_stops_asking(tmp_path):
    launcher = Launcher()
    pid = launcher._proc.pid
    launcher.close()
    assert launcher._proc.returncode == 0
    assert not os.path.exists(f"/proc/{pid}")  # reaped by close: gone


def test_another_interpreter_or_environment_starts_a_fresh_process(launched, tmp_path):
    broker = BrokerProcess(tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"}).start()
    try:
        assert isinstance(broker.proc, subprocess.Popen)
    finally:
        broker.close()
