"""``magnetar admin topics / subscriptions`` as a user runs them: child processes against a real
broker, messages produced with the official pulsar-client, every change checked in the broker's
own stats; and the pure pieces (relative times, message ids, peeked messages) on their own."""

from __future__ import annotations

import json

import pulsar
import pytest

from magnetar.cli.admin.topic_values import cli_message_id, hex_dump, relative_seconds, render_peeked
from magnetar.client.admin.topics import EARLIEST_JSON, LATEST_JSON, split_entry
from magnetar.protocol import pulsar_wire_pb2 as wire
from magnetar.protocol.batch import encode_batch
from tests.interop.support import admin_call

from .conftest import admin
from .conftest import admin_ok as ok


def fails(broker, code: int, *args: str) -> str:
    """The command's stderr, after checking it ended with ``code`` and no traceback."""
    done = admin(broker, *args)
    assert done.returncode == code, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done.stderr


def backlog(broker, topic: str, sub: str) -> int:
    status, stats = admin_call(broker, "GET", "/admin/v2/" + topic.replace("://", "/") + "/stats")
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


# -- against a broker ------------------------------------------------------------------------------------


@pytest.mark.slow  # a CLI process per call, dozens of calls
@pytest.mark.interop
def test_topics_create_list_partition_delete_and_exit_codes(broker, topic):
    partitioned = topic + "-p"
    assert ok(broker, "topics", "create", topic) == ""
    assert topic in ok(broker, "topics", "list", "public/default").splitlines()
    assert topic in json.loads(ok(broker, "topics", "list", "public/default", "--json"))
    err = fails(broker, 4, "topics", "create", topic)
    assert "HTTP 409" in err and err.startswith("Error: ")

    ok(broker, "topics", "create-partitioned-topic", partitioned, "-p", "3")
    assert json.loads(ok(broker, "topics", "get-partitioned-topic-metadata", partitioned, "--json")) == {
        "partitions": 3
    }
    ok(broker, "topics", "update-partitioned-topic", partitioned, "--partitions", "4")
    assert json.loads(ok(broker, "topics", "get-partitioned-topic-metadata", partitioned, "--json")) == {
        "partitions": 4
    }
    assert partitioned in ok(broker, "topics", "list-partitioned-topics", "public/default").splitlines()
    summed = json.loads(ok(broker, "topics", "partitioned-stats", partitioned, "--per-partition"))
    assert len(summed["partitions"]) == 4

    ok(broker, "topics", "delete-partitioned-topic", partitioned)
    assert partitioned not in ok(broker, "topics", "list-partitioned-topics", "public/default")
    ok(broker, "topics", "delete", topic)
    assert topic not in ok(broker, "topics", "list", "public/default").splitlines()

    err = fails(broker, 3, "topics", "stats", topic)
    assert "HTTP 404" in err and "does not exist" in err
    assert "Missing argument" in fails(broker, 2, "topics", "create")
    assert "Missing option" in fails(broker, 2, "topics", "skip", topic, "-n", "1")
    assert "not a time" in fails(broker, 2, "topics", "reset-cursor", topic, "-s", "s", "-t", "soon")
    assert fails(broker, 3, "topics", "list", "public/no-such-namespace")
    assert "cannot reach" in fails(
        broker, 6, "--admin-url", "http://127.0.0.1:9", "topics", "list", "public/default"
    )


@pytest.mark.slow  # a CLI process per call, dozens of calls
@pytest.mark.interop
def test_subscription_verbs_move_the_backlog_and_peek_shows_the_payloads(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode(), properties={"n": str(i)}) for i in range(5)]

    ok(broker, "topics", "create-subscription", topic, "-s", "audit", "-m", "earliest")
    ok(broker, "subscriptions", "create", topic, "-s", "late")  # latest: nothing behind it
    assert ok(broker, "topics", "subscriptions", topic).splitlines() == ["audit", "late"]
    assert json.loads(ok(broker, "subscriptions", "list", topic, "--json")) == ["audit", "late"]
    assert backlog(broker, topic, "audit") == 5 and backlog(broker, topic, "late") == 0

    stats = json.loads(ok(broker, "topics", "stats", topic))
    assert stats["msgInCounter"] == 5 and stats["subscriptions"]["audit"]["msgBacklog"] == 5
    assert "ledgers" in json.loads(ok(broker, "topics", "stats-internal", topic, "--json"))

    text = ok(broker, "topics", "peek-messages", topic, "-s", "audit", "-n", "2")
    first_id = f"{ids[0].ledger_id()}:{ids[0].entry_id()}"
    assert f"Message ID: {first_id}" in text and "m0" in text and "m1" in text and "m2" not in text
    assert 'Properties: {"n": "0"}' in text
    peeked = json.loads(ok(broker, "subscriptions", "peek", topic, "-s", "audit", "-n", "9", "--json"))
    assert [p["payload"] for p in peeked] == [f"m{i}" for i in range(5)]
    assert peeked[4]["properties"] == {"n": "4"} and peeked[0]["message_id"] == first_id
    assert "6d 30" in ok(broker, "topics", "peek-messages", topic, "-s", "audit", "--hex")  # "m0"
    assert backlog(broker, topic, "audit") == 5  # peeking consumed nothing

    by_id = ok(
        broker,
        "topics",
        "get-message-by-id",
        topic,
        "-l",
        str(ids[3].ledger_id()),
        "-e",
        str(ids[3].entry_id()),
    )
    assert "m3" in by_id

    ok(broker, "topics", "skip", topic, "-s", "audit", "-n", "2")
    assert backlog(broker, topic, "audit") == 3
    assert "m2" in ok(broker, "topics", "peek-messages", topic, "-s", "audit")
    ok(broker, "subscriptions", "clear-backlog", topic, "-s", "audit")
    assert backlog(broker, topic, "audit") == 0
    ok(
        broker,
        "topics",
        "reset-cursor",
        topic,
        "-s",
        "audit",
        "-m",
        f"{ids[1].ledger_id()}:{ids[1].entry_id()}",
    )
    assert backlog(broker, topic, "audit") == 4
    ok(broker, "topics", "reset-cursor", topic, "-s", "audit", "-t", "1h")
    assert backlog(broker, topic, "audit") == 5
    ok(broker, "topics", "expire-messages", topic, "-s", "audit", "-t", "1h")  # none is that old
    assert backlog(broker, topic, "audit") == 5
    ok(broker, "topics", "skip-all", topic, "-s", "late")
    ok(broker, "topics", "expire-messages-all-subscriptions", topic, "-t", "0")
    assert backlog(broker, topic, "audit") == 0

    assert fails(broker, 3, "topics", "skip", topic, "-s", "nobody", "-n", "1")
    ok(broker, "topics", "unsubscribe", topic, "-s", "audit")
    ok(broker, "subscriptions", "delete", topic, "-s", "late")
    assert ok(broker, "topics", "subscriptions", topic) == ""
    producer.close()

    last = json.loads(ok(broker, "topics", "terminate", topic, "--json"))
    assert (last["ledgerId"], last["entryId"]) == (ids[4].ledger_id(), ids[4].entry_id())
    with pytest.raises(pulsar.TopicTerminated):
        client.create_producer(topic).send(b"late")


@pytest.mark.slow  # a CLI process per call, dozens of calls
@pytest.mark.interop
def test_peek_splits_a_batch_and_permissions_round_trip(broker, client, topic):
    producer = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=60_000)
    ok(broker, "topics", "create-subscription", topic, "-s", "s", "-m", "earliest")
    for i in range(3):
        producer.send_async(f"b{i}".encode(), None, properties={"i": str(i)})
    producer.flush()
    peeked = json.loads(ok(broker, "topics", "peek-messages", topic, "-s", "s", "-n", "3", "--json"))
    assert [(p["payload"], p["properties"], p["batch_index"]) for p in peeked] == [
        (f"b{i}", {"i": str(i)}, i) for i in range(3)
    ]
    assert "Batch Message ID" in ok(broker, "topics", "peek-messages", topic, "-s", "s")

    ok(broker, "topics", "grant-permission", topic, "--role", "app", "--actions", "produce,consume")
    grants = json.loads(ok(broker, "topics", "permissions", topic, "--json"))
    assert sorted(grants["app"]) == ["consume", "produce"]
    assert "produce" in ok(broker, "topics", "permissions", topic)
    ok(broker, "topics", "revoke-permission", topic, "--role", "app")
    assert "app" not in json.loads(ok(broker, "topics", "permissions", topic, "--json"))
    assert fails(broker, 1, "topics", "revoke-permission", topic, "--role", "app")


# -- pure pieces -----------------------------------------------------------------------------------------


def test_relative_times_read_as_pulsar_admin_writes_them():
    assert [relative_seconds(t) for t in ("100", "30s", "10m", "3h", "2d", "1w")] == [
        100,
        30,
        600,
        10_800,
        172_800,
        604_800,
    ]
    for bad in ("", "1x", "-5m", "m", "1.5h"):
        with pytest.raises(ValueError):
            relative_seconds(bad)


def test_message_id_flags_become_pulsars_json():
    assert cli_message_id("earliest") == EARLIEST_JSON
    assert cli_message_id("LATEST") == LATEST_JSON
    assert cli_message_id("7:3") == {"ledgerId": 7, "entryId": 3, "partitionIndex": -1}
    assert cli_message_id("7:3:2") == {"ledgerId": 7, "entryId": 3, "partitionIndex": 2}
    with pytest.raises(ValueError):
        cli_message_id("7")


def test_a_peeked_batch_splits_and_binary_prints_as_a_hex_dump():
    singles = [
        (wire.SingleMessageMetadata(payload_size=2, properties=[wire.KeyValue(key="k", value="v")]), b"hi"),
        (wire.SingleMessageMetadata(payload_size=3), b"\x00\x01\xff"),
    ]
    headers = {"X-Pulsar-Message-ID": "5:9", "X-Pulsar-num-batch-message": "2", "X-Pulsar-PROPERTY": "{}"}
    text, binary = split_entry(encode_batch(singles), headers)
    assert (text.message_id, text.properties, text.payload) == ("5:9:-1:0", {"k": "v"}, b"hi")
    assert (binary.message_id, binary.batch_index, binary.payload) == ("5:9:-1:1", 1, b"\x00\x01\xff")
    assert render_peeked(text).splitlines() == ["Batch Message ID: 5:9:-1:0", 'Properties: {"k": "v"}', "hi"]
    assert render_peeked(binary).splitlines()[-1] == "00000000  00 01 ff" + " " * 39 + "  |...|"
    assert hex_dump(b"A" * 17).splitlines()[1].startswith("00000010  41")
    (single,) = split_entry(b"plain", {"X-Pulsar-Message-ID": "1:2", "X-Pulsar-PROPERTY": '{"a": "b"}'})
    assert (single.message_id, single.properties, single.batch_index) == ("1:2", {"a": "b"}, -1)
