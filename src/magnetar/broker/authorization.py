"""Who may do what: Pulsar's ``PulsarAuthorizationProvider`` over namespace policies.

Grants live in the namespace's policies as Pulsar's ``auth_policies``: ``namespace_auth``
``{role: [actions]}`` and ``destination_auth`` ``{topic: {role: [actions]}}``. Superusers (from
the config) may do everything; a tenant's ``adminRoles`` may administer the tenant's namespaces
and topics and produce/consume there; any other role needs ``produce`` to produce, ``consume`` to
subscribe, either one to look a topic up. Pure logic: the broker and the admin API ask it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.errors import BrokerError
from magnetar.protocol import wire
from magnetar.protocol.topic_name import TopicName

PRODUCE = "produce"
CONSUME = "consume"
#: Pulsar's AuthAction enum: all of them can be granted; produce and consume are checked here.
ACTIONS = (PRODUCE, CONSUME, "functions", "sources", "sinks", "packages")

#: Topic operations (Pulsar's TopicOperation, grouped as its provider groups them).
LOOKUP = "lookup"  # LOOKUP, GET_STATS, GET_METADATA: produce or consume
ADMIN = "admin"  # TERMINATE, DELETE, CREATE ...: tenant admins only


class AuthorizationError(BrokerError):
    """Refused for want of a permission: Pulsar's ServerError AuthorizationError."""

    code = wire.AuthorizationError


def check_tenant_info(info: Any) -> dict[str, Any]:
    """Pulsar's TenantInfo JSON: ``adminRoles`` and ``allowedClusters`` lists of names."""
    if not isinstance(info, dict):
        raise ValueError('tenant info must be a JSON object: {"adminRoles": [...], "allowedClusters": [...]}')
    for key in ("adminRoles", "allowedClusters"):
        value = info.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{key} must be a JSON list of names")
    return info


def parse_actions(value: Any) -> list[str]:
    """A grant's body, Pulsar's JSON list of AuthAction names; ValueError for anything else."""
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise ValueError(f"permissions must be a JSON list of actions out of {', '.join(ACTIONS)}")
    unknown = sorted(set(value) - set(ACTIONS))
    if unknown:
        raise ValueError(f"unknown action(s) {', '.join(unknown)}: expected {', '.join(ACTIONS)}")
    return sorted(set(value))


@dataclass
class AuthPolicies:
    """A namespace's grants, in Pulsar's JSON (``Policies.auth_policies``)."""

    namespace_auth: dict[str, list[str]] = field(default_factory=dict)
    destination_auth: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace_auth": {r: list(a) for r, a in self.namespace_auth.items()},
            "destination_auth": {
                t: {r: list(a) for r, a in g.items()} for t, g in self.destination_auth.items()
            },
            "subscription_auth_roles": {},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> AuthPolicies:
        data = data or {}
        return cls(
            {r: list(a) for r, a in (data.get("namespace_auth") or {}).items()},
            {t: {r: list(a) for r, a in g.items()} for t, g in (data.get("destination_auth") or {}).items()},
        )

    def topic_permissions(self, topic: str) -> dict[str, list[str]]:
        """Pulsar's GET .../{topic}/permissions: the namespace's grants and the topic's, merged."""
        merged = {role: set(actions) for role, actions in self.namespace_auth.items()}
        for role, actions in self.destination_auth.get(topic, {}).items():
            merged.setdefault(role, set()).update(actions)
        return {role: sorted(actions) for role, actions in sorted(merged.items())}


def wildcard_match(pattern: str, role: str) -> bool:
    """Pulsar's ``authorizationAllowWildcardsMatching``: ``prefix*`` or ``*suffix`` grants."""
    if pattern.endswith("*"):
        return role.startswith(pattern[:-1])
    if pattern.startswith("*"):
        return role.endswith(pattern[1:])
    return False


def _in(grants: dict[str, list[str]] | None, role: str, action: str, wildcards: bool) -> bool:
    if not grants:
        return False
    if action in grants.get(role, ()):
        return True
    return wildcards and any(action in a and wildcard_match(p, role) for p, a in grants.items())


def granted(policies: AuthPolicies, topic: TopicName | None, role: str, action: str, wildcards: bool) -> bool:
    """Does ``role`` hold ``action`` on the namespace, or on ``topic`` (or, for a partition, on its
    partitioned topic), as Pulsar's ``checkPermission``?"""
    if _in(policies.namespace_auth, role, action, wildcards):
        return True
    if topic is None:
        return False
    names = [str(topic)]
    if (base := topic.partitioned_base()) is not None:
        names.append(str(base))
    return any(_in(policies.destination_auth.get(n), role, action, wildcards) for n in names)


class Authorizer:
    """The broker's answers to "may ``role`` do this?"; ``tenant_info`` and ``auth_policies`` read
    the metadata (a missing tenant or namespace raises, and grants nothing)."""

    def __init__(
        self,
        superusers: Iterable[str],
        tenant_info: Callable[[str], dict[str, Any]],
        auth_policies: Callable[[str], AuthPolicies],
        wildcards: bool = False,
    ) -> None:
        self.superusers = frozenset(superusers)
        self._tenant_info = tenant_info
        self._auth_policies = auth_policies
        self.wildcards = wildcards

    def is_superuser(self, role: str | None) -> bool:
        return role is not None and role in self.superusers

    def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        """A superuser, or a role in the tenant's ``adminRoles`` (Pulsar's validateTenantAdminAccess)."""
        if role is None:
            return False
        if self.is_superuser(role):
            return True
        try:
            admin_roles = self._tenant_info(tenant).get("adminRoles") or []
        except BrokerError:
            return False
        return isinstance(admin_roles, list) and role in admin_roles  # never a substring of a str

    def _granted(self, topic: TopicName, role: str, action: str) -> bool:
        try:
            policies = self._auth_policies(topic.namespace_name)
        except BrokerError:
            return False
        return granted(policies, topic, role, action, self.wildcards)

    def can_topic(self, topic: TopicName, role: str | None, operation: str) -> bool:
        """``operation``: PRODUCE, CONSUME, LOOKUP or ADMIN; tenant admins may do all of them."""
        if role is None:
            return False
        if self.is_tenant_admin(topic.tenant, role):
            return True
        if operation == LOOKUP:
            return self._granted(topic, role, PRODUCE) or self._granted(topic, role, CONSUME)
        if operation in (PRODUCE, CONSUME):
            return self._granted(topic, role, operation)
        return False

    def can_namespace(self, namespace: str, role: str | None, action: str) -> bool:
        """Does ``role`` hold ``action`` (PRODUCE, CONSUME) on every topic of ``namespace``: a
        tenant admin, or a grant on the namespace itself (an MQTT wildcard filter needs one)."""
        if role is None:
            return False
        if self.is_tenant_admin(namespace.split("/")[0], role):
            return True
        try:
            policies = self._auth_policies(namespace)
        except BrokerError:
            return False
        return granted(policies, None, role, action, self.wildcards)

    def can_list_topics(self, namespace: str, role: str | None) -> bool:
        """Pulsar's NamespaceOperation GET_TOPICS: tenant admins, or produce/consume on the namespace."""
        if role is None:
            return False
        if self.is_tenant_admin(namespace.split("/")[0], role):
            return True
        try:
            policies = self._auth_policies(namespace)
        except BrokerError:
            return False
        return any(granted(policies, None, role, a, self.wildcards) for a in (PRODUCE, CONSUME))
