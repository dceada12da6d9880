"""The status of a run the broker does in the background (a compaction, an offload), as
pulsar-admin's ``*-status [-w]`` verbs show it: waited for while RUNNING with ``-w``, printed as
JSON or in pulsar-admin's words, and an ERROR ends the command with exit status 1."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import click

from magnetar.cli.admin.common import AdminCommandError, print_json

POLL_S = 1.0


def show_run_status(
    read: Callable[[], dict[str, Any]],
    wait_complete: bool,
    as_json: bool,
    says: Mapping[str, str],
    error: str,
    error_line: str | None = None,
) -> None:
    """Read the status (again every ``POLL_S`` while it is RUNNING and ``wait_complete``), print
    it as JSON or as ``says`` words it, and on ERROR print ``error_line`` (if any) and fail with
    ``error`` and the broker's ``lastError``."""
    status = read()
    while wait_complete and status["status"] == "RUNNING":
        time.sleep(POLL_S)
        status = read()
    if as_json:
        print_json(status)
    elif status["status"] in says:
        click.echo(says[status["status"]])
    if status["status"] == "ERROR":
        if error_line is not None:
            click.echo(error_line)
        raise AdminCommandError(f"{error}: {status.get('lastError', '')}", 1)
