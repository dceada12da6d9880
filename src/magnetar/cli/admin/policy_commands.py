"""pulsar-admin's ``set-X``, ``get-X`` and ``remove-X`` verbs for a policy that a namespace and a
topic both hold, made once: ``namespaces {set,get,remove}-X TENANT/NAMESPACE`` and ``topics
{set,get,remove}-X TOPIC`` (the topic's ``get`` with ``-ap``/``--applied``), calling the admin
client's ``set_x``, ``get_x`` and ``remove_x`` of ``admin.namespaces`` and ``admin.topics``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from magnetar.cli.admin.common import done, json_option, pass_admin, print_value
from magnetar.cli.admin.namespaces import namespaces
from magnetar.cli.admin.topics import topic_argument, topics
from magnetar.client.admin import AdminClient

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


@dataclass(frozen=True, slots=True)
class Helps:
    """The help of each verb, for one level (a namespace's or a topic's)."""

    set: str
    get: str
    remove: str


@dataclass(frozen=True, slots=True)
class Policy:
    """One policy's verbs: ``verb`` names them (``compaction-threshold``); ``what`` is said in their
    confirmations (``the compaction threshold``); ``options`` are the set verb's flags and
    ``value`` makes the value sent from them; ``told`` adds to the set confirmation."""

    verb: str
    what: str
    options: Decorator
    value: Callable[..., Any]
    namespace: Helps
    topic: Helps
    told: Callable[[Any], str] = lambda _value: ""

    @property
    def method(self) -> str:
        return self.verb.replace("-", "_")


_NAMESPACE = click.argument("namespace", metavar="TENANT/NAMESPACE")
_APPLIED = click.option(
    "-ap",
    "--applied",
    is_flag=True,
    help="What applies: the topic's, else its namespace's, else the broker's.",
)


def add_policy_commands(policy: Policy) -> None:
    """The six commands of ``policy``, under ``magnetar admin namespaces`` and ``topics``."""
    _add(policy, namespaces, _NAMESPACE, "namespace", lambda admin: admin.namespaces, policy.namespace, None)
    _add(policy, topics, topic_argument, "topic", lambda admin: admin.topics, policy.topic, _APPLIED)


def _add(
    policy: Policy,
    group: click.Group,
    argument: Decorator,
    name: str,
    calls: Callable[[AdminClient], object],
    helps: Helps,
    applied: Decorator | None,
) -> None:
    def set_(admin: AdminClient, **params: Any) -> None:
        target = params.pop(name)
        value = policy.value(**params)
        getattr(calls(admin), f"set_{policy.method}")(target, value)
        done(f"Set {policy.what} of {target}{policy.told(value)}")

    def get(admin: AdminClient, as_json: bool, **params: Any) -> None:
        read = getattr(calls(admin), f"get_{policy.method}")
        print_value(read(params.pop(name), **params), as_json)

    def remove(admin: AdminClient, **params: Any) -> None:
        target = params[name]
        getattr(calls(admin), f"remove_{policy.method}")(target)
        done(f"Removed {policy.what} of {target}")

    group.command(f"set-{policy.verb}", help=helps.set)(argument(policy.options(pass_admin(set_))))
    get_command = json_option(pass_admin(get))
    group.command(f"get-{policy.verb}", help=helps.get)(
        argument(get_command if applied is None else applied(get_command))
    )
    group.command(f"remove-{policy.verb}", help=helps.remove)(argument(pass_admin(remove)))
