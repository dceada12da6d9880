"""``magnetar admin subscriptions``: the subscription verbs of ``admin topics`` under plain names
(``list``, ``create``, ``delete``...): the same click commands, registered a second time."""

from __future__ import annotations

import click

from magnetar.cli.admin import topics


@click.group("subscriptions")
def subscriptions() -> None:
    """A topic's subscriptions (the same commands as admin topics' subscription verbs)."""


for name, command in {
    "list": topics.list_subscriptions,
    "create": topics.create_subscription,
    "delete": topics.unsubscribe,
    "skip": topics.skip,
    "clear-backlog": topics.clear_backlog,
    "reset-cursor": topics.reset_cursor,
    "expire": topics.expire_messages,
    "expire-all": topics.expire_messages_all_subscriptions,
    "peek": topics.peek_messages,
    "consumers": topics.consumers,
}.items():
    subscriptions.add_command(command, name)
