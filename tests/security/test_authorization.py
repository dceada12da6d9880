"""The permission checks (Pulsar's PulsarAuthorizationProvider), without a broker: superusers,
tenant admins, namespace and topic grants, partitions, wildcards; and which right each admin path
needs."""

from __future__ import annotations

import pytest

from magnetar.admin.authz import LIST_TOPICS, SUPERUSER, TENANT_ADMIN, allowed, requirement
from magnetar.broker.authorization import (
    ADMIN,
    CONSUME,
    LOOKUP,
    PRODUCE,
    Authorizer,
    AuthPolicies,
    parse_actions,
)
from magnetar.broker.errors import TopicNotFound
from magnetar.protocol.topic_name import TopicName

T = TopicName.parse("persistent://city/alerts/area-1")
OTHER = TopicName.parse("persistent://city/alerts/area-2")


def authorizer(grants: AuthPolicies | None = None, wildcards: bool = False) -> Authorizer:
    tenants = {"city": {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}}
    namespaces = {"city/alerts": grants or AuthPolicies()}

    def tenant(name: str) -> dict:
        if name not in tenants:
            raise TopicNotFound(f"Tenant {name} does not exist")
        return tenants[name]

    def policies(name: str) -> AuthPolicies:
        if name not in namespaces:
            raise TopicNotFound(f"Namespace {name} does not exist")
        return namespaces[name]

    return Authorizer(["root"], tenant, policies, wildcards)


def test_a_role_with_no_grant_may_do_nothing():
    authz = authorizer()
    for operation in (PRODUCE, CONSUME, LOOKUP, ADMIN):
        assert not authz.can_topic(T, "car-1", operation)
    assert not authz.can_list_topics("city/alerts", "car-1")


def test_superuser_and_tenant_admin_may_do_everything_on_the_tenant():
    authz = authorizer()
    for role in ("root", "ops"):
        for operation in (PRODUCE, CONSUME, LOOKUP, ADMIN):
            assert authz.can_topic(T, role, operation)
        assert authz.can_list_topics("city/alerts", role)
    assert authz.is_superuser("root") and not authz.is_superuser("ops")
    # the tenant's admins are nobody's elsewhere; a superuser is everyone's
    elsewhere = TopicName.parse("persistent://public/default/x")
    assert not authz.can_topic(elsewhere, "ops", PRODUCE)
    assert authz.can_topic(elsewhere, "root", PRODUCE)
    assert not authz.can_topic(T, None, LOOKUP)


def test_admin_roles_are_a_list_never_a_substring():
    from magnetar.broker.authorization import check_tenant_info

    authz = Authorizer(["root"], lambda t: {"adminRoles": "ops-team"}, lambda n: AuthPolicies())
    assert not authz.is_tenant_admin("city", "ops")
    assert check_tenant_info({"adminRoles": ["ops"], "allowedClusters": ["standalone"]})
    for bad in ({"adminRoles": "ops"}, {"allowedClusters": [1]}, ["ops"]):
        with pytest.raises(ValueError):
            check_tenant_info(bad)


def test_namespace_grant_covers_every_topic_of_the_namespace():
    authz = authorizer(AuthPolicies(namespace_auth={"car-1": [CONSUME]}))
    for topic in (T, OTHER):
        assert authz.can_topic(topic, "car-1", CONSUME)
        assert authz.can_topic(topic, "car-1", LOOKUP)
        assert not authz.can_topic(topic, "car-1", PRODUCE)
        assert not authz.can_topic(topic, "car-1", ADMIN)
    assert authz.can_list_topics("city/alerts", "car-1")


def test_topic_grant_covers_that_topic_and_its_partitions_only():
    authz = authorizer(AuthPolicies(destination_auth={str(T): {"car-1": [CONSUME, PRODUCE]}}))
    assert authz.can_topic(T, "car-1", CONSUME)
    assert authz.can_topic(T, "car-1", PRODUCE)
    assert authz.can_topic(T.partition(3), "car-1", CONSUME)
    assert not authz.can_topic(OTHER, "car-1", CONSUME)
    assert not authz.can_topic(OTHER, "car-1", LOOKUP)
    assert not authz.can_list_topics("city/alerts", "car-1")  # GET_TOPICS reads namespace grants


def test_functions_and_other_actions_grant_neither_produce_nor_consume():
    authz = authorizer(AuthPolicies(namespace_auth={"fn": ["functions", "sources", "sinks", "packages"]}))
    for operation in (PRODUCE, CONSUME, LOOKUP):
        assert not authz.can_topic(T, "fn", operation)


def test_wildcard_grants_only_with_the_setting():
    grants = AuthPolicies(
        namespace_auth={"car-*": [CONSUME]}, destination_auth={str(T): {"*-ops": [PRODUCE]}}
    )
    assert not authorizer(grants).can_topic(T, "car-7", CONSUME)
    authz = authorizer(grants, wildcards=True)
    assert authz.can_topic(T, "car-7", CONSUME)
    assert not authz.can_topic(T, "bus-7", CONSUME)
    assert authz.can_topic(T, "night-ops", PRODUCE)
    assert not authz.can_topic(OTHER, "night-ops", PRODUCE)


def test_unknown_namespace_or_tenant_grants_nothing():
    authz = authorizer(AuthPolicies(namespace_auth={"car-1": [CONSUME]}))
    missing = TopicName.parse("persistent://nowhere/ns/t")
    assert not authz.can_topic(missing, "car-1", CONSUME)
    assert not authz.can_list_topics("nowhere/ns", "car-1")
    assert authz.can_topic(missing, "root", CONSUME)


def test_auth_policies_round_trip_in_pulsars_json_and_merge_for_a_topic():
    grants = AuthPolicies(
        namespace_auth={"a": [CONSUME]}, destination_auth={str(T): {"a": [PRODUCE], "b": [CONSUME]}}
    )
    data = grants.to_json()
    assert set(data) == {"namespace_auth", "destination_auth", "subscription_auth_roles"}
    assert AuthPolicies.from_json(data) == grants
    assert grants.topic_permissions(str(T)) == {"a": [CONSUME, PRODUCE], "b": [CONSUME]}
    assert grants.topic_permissions(str(OTHER)) == {"a": [CONSUME]}
    assert AuthPolicies.from_json(None) == AuthPolicies()


def test_parse_actions_takes_pulsars_auth_actions_only():
    assert parse_actions(["consume", "produce", "consume"]) == ["consume", "produce"]
    assert parse_actions(["functions", "sources", "sinks", "packages"]) == [
        "functions",
        "packages",
        "sinks",
        "sources",
    ]
    for bad in (["read"], "consume", [1], {"consume": True}):
        with pytest.raises(ValueError):
            parse_actions(bad)


@pytest.mark.parametrize(
    ("method", "path", "need"),
    [
        ("GET", "/admin/v2/tenants", SUPERUSER),
        ("PUT", "/admin/v2/tenants/{tenant}", SUPERUSER),
        ("GET", "/admin/v2/brokers/health", SUPERUSER),
        ("GET", "/admin/v2/clusters", SUPERUSER),
        ("GET", "/admin/v2/clusters/{cluster}", SUPERUSER),
        ("PUT", "/admin/v2/clusters/{cluster}", SUPERUSER),
        ("DELETE", "/admin/v2/clusters/{cluster}", SUPERUSER),
        ("POST", "/admin/v2/namespaces/{tenant}/{namespace}/replication", TENANT_ADMIN),
        ("GET", "/admin/v2/namespaces/{tenant}", TENANT_ADMIN),
        ("POST", "/admin/v2/namespaces/{tenant}/{namespace}/permissions/{role}", TENANT_ADMIN),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}", LIST_TOPICS),
        ("GET", "/admin/v2/non-persistent/{tenant}/{namespace}/partitioned", LIST_TOPICS),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/stats", LOOKUP),
        ("HEAD", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions", LOOKUP),
        ("PUT", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/partitions", ADMIN),
        ("DELETE", "/admin/v2/persistent/{tenant}/{namespace}/{topic}", ADMIN),
        ("POST", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/terminate", ADMIN),
        ("POST", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/replication", ADMIN),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/replication", ADMIN),
        ("POST", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/permissions/{role}", ADMIN),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscriptions", CONSUME),
        (
            "POST",
            "/admin/v2/persistent/{tenant}/{namespace}/{topic}/subscription/{subscription}/skip_all",
            CONSUME,
        ),
        ("GET", "/admin/v2/persistent/{tenant}/{namespace}/{topic}/messageid/{index}", CONSUME),
        (  # a subscription's consumers, paged: stats, as .../stats asks
            "GET",
            "/admin/v2/non-persistent/{tenant}/{namespace}/{topic}/subscription/{subscription}/consumers",
            LOOKUP,
        ),
        ("GET", "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema", LOOKUP),
        ("POST", "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema", PRODUCE),
        ("DELETE", "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema", ADMIN),
        ("GET", "/admin/v2/somewhere/new", SUPERUSER),
        ("GET", "/ws/v2/producer/persistent/{tenant}/{namespace}/{topic}", PRODUCE),
        ("GET", "/ws/v2/consumer/non-persistent/{tenant}/{namespace}/{topic}/{subscription}", CONSUME),
        ("GET", "/ws/v2/reader/persistent/{tenant}/{namespace}/{topic}", CONSUME),
        ("POST", "/topics/persistent/{tenant}/{namespace}/{topic}", PRODUCE),
        ("POST", "/topics/persistent/{tenant}/{namespace}/{topic}/partitions/{partition}", PRODUCE),
        ("GET", "/ws/v2/elsewhere/persistent/{tenant}/{namespace}/{topic}", SUPERUSER),
    ],
)
def test_each_admin_path_needs_the_right_pulsar_asks(method, path, need):
    assert requirement(method, path)[0] == need


def test_websocket_and_rest_produce_paths_name_their_domain():
    assert requirement(
        "GET", "/ws/v2/consumer/non-persistent/{tenant}/{namespace}/{topic}/{subscription}"
    ) == (
        CONSUME,
        "non-persistent",
    )
    assert requirement("POST", "/topics/persistent/{tenant}/{namespace}/{topic}") == (PRODUCE, "persistent")


def test_admin_refusals_carry_pulsars_reasons():
    authz = authorizer(AuthPolicies(namespace_auth={"car-1": [CONSUME]}))
    match = {"tenant": "city", "namespace": "alerts", "topic": "area-1"}
    stats = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/stats"
    terminate = "/admin/v2/persistent/{tenant}/{namespace}/{topic}/terminate"
    assert allowed(authz, "car-1", "GET", stats, match) is None
    assert "ADMIN" in allowed(authz, "car-1", "POST", terminate, match)
    assert allowed(authz, "ops", "POST", terminate, match) is None
    assert (
        allowed(authz, "ops", "GET", "/admin/v2/tenants", {}) == "This operation requires super-user access"
    )
    assert allowed(authz, "root", "GET", "/admin/v2/tenants", {}) is None
    reason = allowed(authz, "car-1", "GET", "/admin/v2/namespaces/{tenant}", match)
    assert reason == "Don't have permission to administrate resources on this tenant"
    assert allowed(authz, "car-1", "GET", "/metrics", {}) is None


def test_authorization_without_authentication_is_a_start_up_error():
    from magnetar.broker.config import BrokerConfig

    with pytest.raises(ValueError, match="authorization_enabled needs authentication_enabled"):
        BrokerConfig.load(None, authorization_enabled=True)
    with pytest.raises(ValueError, match="superuser_roles"):
        BrokerConfig.load(None, superuser_roles="root")
    assert not BrokerConfig().authorization_enabled  # off by default
