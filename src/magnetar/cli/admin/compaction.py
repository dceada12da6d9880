"""``magnetar admin topics compact`` and ``compaction-status``: pulsar-admin's verbs, its messages and
``-w`` (wait until the compaction is over)."""

from __future__ import annotations

import time

import click

from magnetar.cli.admin.common import AdminCommandError, done, json_option, pass_admin, print_json
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient
from magnetar.client.admin.topics import full_name

#: What pulsar-admin says of each status.
_SAYS = {
    "NOT_RUN": "Compaction has not been run",
    "RUNNING": "Compaction is currently running",
    "SUCCESS": "Compaction was a success",
}
_POLL_S = 1.0


@topics.command("compact")
@topic_argument
@pass_admin
def compact(admin: AdminClient, topic: str) -> None:
    """Start compacting a topic (the latest message of each key; readers with read_compacted)."""
    admin.topics.trigger_compaction(topic)
    done(f"Topic compaction requested for {full_name(topic)}")


@topics.command("compaction-status")
@topic_argument
@click.option("-w", "--wait-complete", is_flag=True, help="Wait until the compaction is over.")
@json_option
@pass_admin
def compaction_status(admin: AdminClient, topic: str, wait_complete: bool, as_json: bool) -> None:
    """Whether the topic's last compaction ran, runs or failed (exit status 1 after an error)."""
    status = admin.topics.compaction_status(topic)
    while wait_complete and status["status"] == "RUNNING":
        time.sleep(_POLL_S)
        status = admin.topics.compaction_status(topic)
    if as_json:
        print_json(status)
    elif status["status"] in _SAYS:
        click.echo(_SAYS[status["status"]])
    if status["status"] == "ERROR":
        raise AdminCommandError(f"Error in compaction: {status.get('lastError', '')}", 1)
