"""``magnetar admin topics compact`` and ``compaction-status``: pulsar-admin's verbs, its messages and
``-w`` (wait until the compaction is over)."""

from __future__ import annotations

import click

from magnetar.cli.admin.common import done, json_option, pass_admin
from magnetar.cli.admin.run_status import show_run_status
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient
from magnetar.client.admin.topics import full_name

#: What pulsar-admin says of each status.
_SAYS = {
    "NOT_RUN": "Compaction has not been run",
    "RUNNING": "Compaction is currently running",
    "SUCCESS": "Compaction was a success",
}


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
    show_run_status(
        lambda: admin.topics.compaction_status(topic), wait_complete, as_json, _SAYS, "Error in compaction"
    )
