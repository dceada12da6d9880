"""Authorization (Pulsar's namespace and topic permissions) against a real broker with tokens:
the official client refused with AuthorizationError until a grant, PRODUCER / SUBSCRIBE / LOOKUP /
PARTITIONED_METADATA / GET_TOPICS_OF_NAMESPACE refusals on the wire, a revoke closing what is
open (as Pulsar's broker does), and the admin API's 401 / 403 / 200 for superusers, tenant admins
and others."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import pulsar
import pytest

from magnetar.client.admin import AdminClient, AdminError, ForbiddenError, UnauthorizedError
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.security import tokens
from tests.interop.conftest import CLIENT_LOGGER
from tests.interop.support import RawConnection, receive_n
from tests.waiting import eventually

T = wire.BaseCommand


@pytest.fixture
def secured(broker_factory):
    """(broker, token for a role) with authentication and authorization on, superuser ``root``."""
    key = tokens.create_secret_key()
    broker = broker_factory(
        {
            "authentication_enabled": True,
            "token_secret_key": "data:;base64," + base64.b64encode(key).decode(),
            "authorization_enabled": True,
            "superuser_roles": ["root"],
        }
    )
    return broker, lambda role: tokens.create_token(key, role, 600)


def client(broker, token: str) -> pulsar.Client:
    return pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(token),
        operation_timeout_seconds=5,
        logger=CLIENT_LOGGER,
    )


def call(broker, method: str, path: str, token: str | None = None, body=None) -> tuple[int, object]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.http_url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
            return response.status, json.loads(text) if text.strip().startswith(("{", "[")) else text
    except urllib.error.HTTPError as exc:
        text = exc.read().decode()
        return exc.code, json.loads(text) if text else None


def local(topic: str) -> str:
    return topic.rsplit("/", 1)[1]


def raw_as(broker, token: str) -> RawConnection:
    raw = RawConnection(broker.port)
    raw.send_command(
        wire.CommandConnect(
            client_version="raw", protocol_version=20, auth_method_name="token", auth_data=token.encode()
        )
    )
    raw.expect(T.CONNECTED)
    return raw


def subscribe(raw: RawConnection, topic: str, consumer_id: int, request_id: int) -> wire.BaseCommand:
    raw.send_command(
        wire.CommandSubscribe(
            topic=topic,
            subscription="s",
            sub_type=wire.CommandSubscribe.Shared,
            consumer_id=consumer_id,
            request_id=request_id,
        )
    )
    return raw.recv_frame()


def failures(broker, token: str) -> str:
    status, text = call(broker, "GET", "/metrics", token)
    assert status == 200
    return "\n".join(line for line in text.splitlines() if line.startswith("magnetar_authorization_failures"))


def test_consumer_without_consume_is_refused_until_granted(secured, topic):
    broker, token = secured
    car = client(broker, token("car-1"))
    root = client(broker, token("root"))  # a superuser needs no grant
    try:
        with pytest.raises(pulsar.AuthorizationError):
            car.subscribe(topic, "s")
        status, _ = call(
            broker,
            "POST",
            "/admin/v2/namespaces/public/default/permissions/car-1",
            token("root"),
            ["consume"],
        )
        assert status == 204
        consumer = car.subscribe(topic, "s")
        with pytest.raises(pulsar.AuthorizationError):  # consume is not produce
            car.create_producer(topic)
        root.create_producer(topic).send(b"alert")
        assert [m.data() for m in receive_n(consumer, 1, ack=True)] == [b"alert"]
        counted = failures(broker, token("root"))
        assert 'operation="produce"' in counted and 'operation="partitioned_metadata"' in counted, counted
    finally:
        car.close()
        root.close()


def test_each_request_is_checked_with_pulsars_errors_and_a_topic_grant_covers_its_topic(secured, topic):
    broker, token = secured
    other = topic + "-other"
    status, _ = call(
        broker,
        "POST",
        f"/admin/v2/persistent/public/default/{local(topic)}/permissions/writer",
        token("root"),
        ["produce"],
    )
    assert status == 204
    raw = raw_as(broker, token("writer"))
    try:
        raw.send_command(wire.CommandLookupTopic(topic=topic, request_id=1))
        assert raw.expect(T.LOOKUP_RESPONSE).body().response == wire.CommandLookupTopicResponse.Connect
        raw.create_producer(topic, producer_id=1, request_id=2)  # the topic grant is enough

        reply = subscribe(raw, topic, consumer_id=1, request_id=3).body()
        assert (reply.error, reply.message) == (
            wire.AuthorizationError,
            "Client is not authorized to subscribe",
        )
        raw.send_command(wire.CommandLookupTopic(topic=other, request_id=4))
        lookup = raw.expect(T.LOOKUP_RESPONSE).body()
        assert lookup.response == wire.CommandLookupTopicResponse.Failed
        assert (lookup.error, lookup.message) == (
            wire.AuthorizationError,
            "Client is not authorized to Lookup",
        )
        raw.send_command(wire.CommandPartitionedTopicMetadata(topic=other, request_id=5))
        meta = raw.expect(T.PARTITIONED_METADATA_RESPONSE).body()
        assert meta.response == wire.CommandPartitionedTopicMetadataResponse.Failed
        assert meta.error == wire.AuthorizationError
        raw.send_command(wire.CommandProducer(topic=other, producer_id=2, request_id=6))
        refused = raw.expect(T.ERROR).body()
        assert (refused.error, refused.message) == (
            wire.AuthorizationError,
            "Client is not authorized to Produce",
        )
        # GET_TOPICS needs a namespace grant
        raw.send_command(wire.CommandGetTopicsOfNamespace(namespace="public/default", request_id=7))
        assert raw.expect(T.ERROR).body().error == wire.AuthorizationError
        schema = wire.Schema(name="s", schema_data=b"", type=wire.Schema.String)
        raw.send_command(wire.CommandGetOrCreateSchema(request_id=8, topic=other, schema=schema))
        assert raw.expect(T.GET_OR_CREATE_SCHEMA_RESPONSE).body().error_code == wire.AuthorizationError
        raw.send_command(wire.CommandPing())  # refusals closed nothing
        assert raw.expect(T.PONG)
    finally:
        raw.close()
    path = f"/admin/v2/persistent/public/default/{local(topic)}/permissions"
    assert call(broker, "GET", path, token("root")) == (200, {"writer": ["produce"]})
    # the refused requests created nothing: only the producer's topic exists
    assert call(broker, "GET", "/admin/v2/persistent/public/default", token("root"))[1] == [topic]
    broker.stop()
    broker.restart()  # grants are kept with the namespace's policies
    assert call(broker, "GET", path, token("root")) == (200, {"writer": ["produce"]})


def test_revoking_closes_open_producers_and_consumers_and_they_are_refused_after(secured, topic):
    broker, token = secured
    admin = AdminClient(broker.http_url, token=token("root"))
    admin.grant_permission_on_namespace("public/default", "car-1", ["produce", "consume"])
    admin.grant_permission(topic, "car-2", ["consume"])
    assert admin.get_namespace_permissions("public/default") == {"car-1": ["consume", "produce"]}
    car1, car2 = raw_as(broker, token("car-1")), raw_as(broker, token("car-2"))
    try:
        car1.create_producer(topic, producer_id=1, request_id=1)
        assert subscribe(car1, topic, consumer_id=1, request_id=2).type == T.SUCCESS
        assert subscribe(car2, topic, consumer_id=1, request_id=1).type == T.SUCCESS

        admin.revoke_permissions_on_namespace("public/default", "car-1")
        closed = {car1.recv_frame().type, car1.recv_frame().type}
        assert closed == {T.CLOSE_PRODUCER, T.CLOSE_CONSUMER}
        reply = subscribe(car1, topic, consumer_id=2, request_id=3).body()  # as the client's reconnect
        assert reply.error == wire.AuthorizationError
        car2.send_command(wire.CommandPing())
        assert car2.expect(T.PONG)  # car-2's topic grant stands: its consumer stays open

        with pytest.raises(AdminError) as not_set:  # car-1's grant was at the namespace level
            admin.revoke_permissions(topic, "car-1")
        assert (
            not_set.value.status == 412
            and not_set.value.reason == "Permissions are not set at the topic level"
        )
        admin.revoke_permissions(topic, "car-2")
        assert car2.expect(T.CLOSE_CONSUMER).body().consumer_id == 1
        assert admin.get_permissions(topic) == {}
    finally:
        car1.close()
        car2.close()


def test_admin_api_401_403_200_for_superuser_tenant_admin_and_others(secured, topic):
    broker, token = secured
    root, ops, car = token("root"), token("ops"), token("car-1")
    # no or bad credentials: 401; good credentials without the right: 403 with Pulsar's reason
    assert call(broker, "GET", "/admin/v2/namespaces/public")[0] == 401
    assert call(broker, "GET", "/admin/v2/namespaces/public", "not-a-token")[0] == 401
    assert call(broker, "GET", "/admin/v2/namespaces/public", car) == (
        403,
        {"reason": "Don't have permission to administrate resources on this tenant"},
    )
    status, body = call(
        broker,
        "PUT",
        "/admin/v2/tenants/city",
        ops,
        {"adminRoles": ["ops"], "allowedClusters": ["standalone"]},
    )
    assert (status, body) == (403, {"reason": "This operation requires super-user access"})
    assert call(broker, "PUT", "/admin/v2/tenants/city", root, {"adminRoles": "ops"})[0] == 400
    # the superuser makes the tenant; its admin runs it
    assert (
        call(
            broker,
            "PUT",
            "/admin/v2/tenants/city",
            root,
            {"adminRoles": ["ops"], "allowedClusters": ["standalone"]},
        )[0]
        == 204
    )
    assert call(broker, "GET", "/admin/v2/tenants/city", root) == (
        200,
        {"adminRoles": ["ops"], "allowedClusters": ["standalone"]},
    )
    assert call(broker, "PUT", "/admin/v2/namespaces/city/alerts", ops)[0] == 204
    assert (
        call(broker, "POST", "/admin/v2/namespaces/city/alerts/permissions/car-1", ops, ["consume"])[0] == 204
    )
    assert call(broker, "GET", "/admin/v2/namespaces/city/alerts/permissions", ops) == (
        200,
        {"car-1": ["consume"]},
    )
    assert call(broker, "POST", "/admin/v2/namespaces/city/alerts/permissions/car-1", ops, ["read"])[0] == 400
    assert call(broker, "GET", "/admin/v2/namespaces/public/default", ops)[0] == 403  # not ops' tenant
    # a consume grant reads topic lists and stats, administers nothing
    assert call(broker, "GET", "/admin/v2/persistent/city/alerts", car) == (200, [])
    assert call(broker, "GET", "/admin/v2/namespaces/city/alerts", car)[0] == 403
    assert call(broker, "PUT", "/admin/v2/persistent/city/alerts/area-1", car)[0] == 403
    assert call(broker, "PUT", "/admin/v2/persistent/city/alerts/area-1", ops)[0] == 204
    assert call(broker, "GET", "/admin/v2/persistent/city/alerts/area-1/stats", car)[0] == 200
    # a tenant admin may produce and consume on its tenant (Pulsar's tenant admins may)
    ops_client = client(broker, ops)
    try:
        ops_client.create_producer("persistent://city/alerts/area-1").send(b"x")
        with pytest.raises(pulsar.AuthorizationError):
            ops_client.create_producer(topic)  # public/default is not ops' tenant
    finally:
        ops_client.close()
    # our admin client maps 401 and 403 to their own exceptions
    with pytest.raises(UnauthorizedError):
        AdminClient(broker.http_url).get_namespace_permissions("city/alerts")
    with pytest.raises(ForbiddenError) as forbidden:
        AdminClient(broker.http_url, token=car).grant_permission_on_namespace(
            "city/alerts", "car-1", ["produce"]
        )
    assert forbidden.value.reason == "Don't have permission to administrate resources on this tenant"
    assert 'operation="admin"' in failures(broker, root)


def consumers_of(broker, token: str, topic: str, subscription: str) -> list[dict]:
    path = "/admin/v2/persistent/" + topic.removeprefix("persistent://") + "/stats"
    status, stats = call(broker, "GET", path, token)
    assert status == 200, stats
    return stats["subscriptions"][subscription]["consumers"]


def test_official_client_after_a_revoke_is_refused_on_reconnect_and_resumes_after_a_new_grant(secured, topic):
    broker, token = secured
    admin = AdminClient(broker.http_url, token=token("root"))
    admin.grant_permission_on_namespace("public/default", "car", ["produce", "consume"])
    car = client(broker, token("car"))
    try:
        consumer = car.subscribe(topic, "s")
        producer = car.create_producer(topic, send_timeout_millis=10_000)
        producer.send(b"before")
        assert [m.data() for m in receive_n(consumer, 1, ack=True)] == [b"before"]

        admin.revoke_permissions_on_namespace("public/default", "car")
        # the broker closed both; the client looks the topic up again and is refused (AuthorizationError)
        eventually(
            lambda: 'operation="lookup"' in failures(broker, token("root")), what="a refused reconnect"
        )
        # No consumer of the subscription is on the broker: nothing can reach the revoked client.
        eventually(lambda: consumers_of(broker, token("root"), topic, "s") == [], what="the consumer closed")

        admin.grant_permission_on_namespace("public/default", "car", ["produce", "consume"])
        producer.send(b"after")  # the client's reconnection gets through once granted again
        seen = [consumer.receive(10_000).data()]
        if seen[0] == b"before":  # its ack may not have reached the broker before the close: again
            seen.append(consumer.receive(10_000).data())
        assert seen[-1] == b"after", seen
    finally:
        car.close()
