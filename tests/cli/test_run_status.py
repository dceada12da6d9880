"""How the ``*-status [-w]`` verbs show a background run's status (cli/admin/run_status.py), without
a broker: the statuses come from a list."""

from __future__ import annotations

import json

import pytest

from magnetar.cli.admin import run_status
from magnetar.cli.admin.common import AdminCommandError
from magnetar.cli.admin.run_status import show_run_status

SAYS = {"RUNNING": "running", "SUCCESS": "a success"}


def reads(*statuses: str, **more):
    answers = iter([{"status": s, **more} for s in statuses])
    return lambda: next(answers)


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(run_status, "POLL_S", 0.0)


def test_waits_while_running_only_when_asked(capsys):
    show_run_status(reads("RUNNING", "RUNNING", "SUCCESS"), True, False, SAYS, "failed")
    assert capsys.readouterr().out == "a success\n"
    show_run_status(reads("RUNNING", "SUCCESS"), False, False, SAYS, "failed")
    assert capsys.readouterr().out == "running\n"


def test_json_is_the_brokers_answer(capsys):
    show_run_status(reads("SUCCESS", lastError=""), False, True, SAYS, "failed")
    assert json.loads(capsys.readouterr().out) == {"status": "SUCCESS", "lastError": ""}


def test_an_error_fails_with_the_brokers_reason(capsys):
    with pytest.raises(AdminCommandError) as failure:
        show_run_status(reads("ERROR", lastError="disk full"), False, False, SAYS, "failed", "Error in it")
    assert failure.value.exit_code == 1 and failure.value.message == "failed: disk full"
    assert capsys.readouterr().out == "Error in it\n"
