"""Slow and dead broadcast consumers with the official client (issue 21 item 5): a stalled consumer
does not hold up the others, the consumers and their figures are listed page by page, and the
optional lag policy closes a consumer that falls too far behind."""

from __future__ import annotations

import urllib.parse

import pytest

from magnetar.protocol import wire
from magnetar.protocol.broadcast import BROADCAST_PROPERTY, BROADCAST_VALUE

from ..waiting import eventually
from .support import RawConnection, admin_call, labelled, receive_n
from .test_broadcast import fan, produce

pytestmark = pytest.mark.interop


def topic_path(topic: str) -> str:
    path = urllib.parse.urlparse(topic)
    return f"/admin/v2/persistent/{path.netloc}{path.path}"


def consumers_page(broker, topic: str, sub: str = "fans", **query) -> dict:
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    status, page = admin_call(broker, "GET", f"{topic_path(topic)}/subscription/{sub}/consumers{suffix}")
    assert status == 200, page
    return page


def by_name(broker, topic: str) -> dict[str, dict]:
    return {e["consumerName"]: e for e in consumers_page(broker, topic, limit=1000)["consumers"]}


def dispatcher_stats(broker, topic: str) -> dict:
    status, stats = admin_call(broker, "GET", f"{topic_path(topic)}/stats")
    assert status == 200, stats
    return stats["subscriptions"]["fans"]


def test_a_stalled_consumer_does_not_hold_up_the_others(broker, client, topic):
    stalled = fan(client, topic, "stalled", receiver_queue_size=5)  # never received from
    others = [fan(client, topic, f"car-{i}") for i in range(4)]
    producer = client.create_producer(topic, batching_enabled=False)
    payload = b"x" * 2048
    sent = [payload + b"%d" % i for i in range(600)]
    for data in sent:
        producer.send_async(data, None)
    producer.flush()
    for consumer in others:
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent

    def stalled_holds_everything() -> dict:
        entry = by_name(broker, topic)["stalled"]
        assert entry["availablePermits"] == 0 and entry["msgBacklog"] == len(sent), entry
        return entry

    entry = eventually(stalled_holds_everything, what="the stalled consumer out of permits")
    # It was sent only what its five permits allowed: the broker keeps no copy of the backlog for it.
    assert entry["msgOutCounter"] <= 5
    assert dispatcher_stats(broker, topic)["msgBacklog"] == len(sent)
    stalled.close()


def test_a_consumer_whose_socket_is_full_does_not_hold_up_the_others(broker, client, topic):
    # A raw consumer with permits for everything that never reads its socket (a small receive
    # window): the broker's writes to it back up, and it is skipped until its socket drains.
    raw = RawConnection(broker.port, receive_buffer=4096)
    raw.handshake()
    raw.subscribe(
        topic,
        "fans",
        wire.CommandSubscribe.Shared,
        permits=100_000,
        metadata=[wire.KeyValue(key=BROADCAST_PROPERTY, value=BROADCAST_VALUE)],
        consumer_name="deaf",
    )
    others = [fan(client, topic, f"car-{i}") for i in range(3)]
    producer = client.create_producer(topic, batching_enabled=False)
    sent = [b"%d:" % i + b"y" * 16_000 for i in range(1000)]  # 16 MB: more than the sockets hold
    for data in sent:
        producer.send_async(data, None)
    producer.flush()
    for consumer in others:
        assert [m.data() for m in receive_n(consumer, len(sent), ack=True)] == sent
    # The broker did stop writing to it: its connection was held for unread writes.
    assert labelled(broker, "magnetar_connection_holds_total", "reason")["writes"] >= 1
    deaf = by_name(broker, topic)["deaf"]
    assert deaf["msgOutCounter"] < len(sent) and deaf["msgBacklog"] == len(sent)
    raw.close()


def test_consumers_are_listed_page_by_page(broker, client, topic):
    names = [f"car-{i}" for i in range(7)]
    consumers = [fan(client, topic, name) for name in names]
    produce(client.create_producer(topic), 4)
    for consumer in consumers[:2]:
        receive_n(consumer, 4, ack=True)
    listed: list[dict] = []
    page = consumers_page(broker, topic, limit=3)
    while True:
        assert page["total"] == 7 and len(page["consumers"]) <= 3
        listed += page["consumers"]
        if page["next"] is None:
            break
        status, page = admin_call(broker, "GET", page["next"])
        assert status == 200, page
    assert [e["consumerName"] for e in listed] == names  # subscribe order
    assert all(not e["detached"] and e["address"] and e["connectedSince"] for e in listed)
    assert all(e["msgOutCounter"] == 4 for e in listed)

    def backlogs() -> list[int]:
        got = [e["msgBacklog"] for e in consumers_page(broker, topic)["consumers"]]
        assert got == [0, 0, 4, 4, 4, 4, 4], got
        return got

    eventually(backlogs, what="the two acknowledging consumers' backlogs at 0")
    assert all(e["lastAckedTimestamp"] > 0 for e in consumers_page(broker, topic, limit=2)["consumers"])
    assert consumers_page(broker, topic, limit=5000)["limit"] == 1000
    stats = dispatcher_stats(broker, topic)
    assert stats["consumersCount"] == 7 and stats["consumersPage"].endswith(
        "/fans/consumers?offset=0&limit=1000"
    )
    status, _ = admin_call(broker, "GET", f"{topic_path(topic)}/subscription/fans/consumers?offset=-1")
    assert status == 400
    status, _ = admin_call(broker, "GET", f"{topic_path(topic)}/subscription/nobody/consumers")
    assert status == 404
    assert labelled(broker, "magnetar_broadcast_consumers", "subscription") == {"fans": 7}


def test_the_lag_policy_closes_a_consumer_that_falls_behind(broker_factory, client_factory, topic):
    broker = broker_factory({"broadcast_max_lag_messages": 40, "broadcast_lag_check_interval_seconds": 0.1})
    client = client_factory(broker.service_url)
    fast = fan(client, topic, "fast")
    fan(client, topic, "laggard")  # receives (its queue fills) and never acknowledges
    producer = client.create_producer(topic, batching_enabled=False)

    def caught_up() -> None:
        eventually(lambda: by_name(broker, topic)["fast"]["msgBacklog"] == 0, what="fast caught up")

    def round_of(n: int, prefix: str) -> None:
        produce(producer, n, prefix)
        receive_n(fast, n, ack=True)
        caught_up()

    round_of(30, "a")  # the laggard is 30 behind: within the limit
    assert dispatcher_stats(broker, topic)["dispatcher"]["lagDisconnects"] == 0
    round_of(10, "b")  # 40 behind: at the limit, not past it
    assert dispatcher_stats(broker, topic)["dispatcher"]["lagDisconnects"] == 0
    # 41 behind: closed, its virtual cursor given up. "fast" holds its ack of this message until
    # the laggard is back, so the subscription is where "fast" is now when the laggard subscribes
    # again (its start depended on when fast's acks came in, and a later start left it too far
    # behind after the next round: closed twice).
    produce(producer, 1, "c")
    eventually(
        lambda: dispatcher_stats(broker, topic)["dispatcher"]["lagDisconnects"] == 1,
        what="the laggard closed by the lag policy",
    )
    assert "laggard" in broker.log_text() and "more than 40 messages behind" in broker.log_text()

    # The official client subscribes again and starts where the subscription is: all it missed
    # but the one message "fast" has not acknowledged yet is lost to it.
    def back() -> dict:
        entry = by_name(broker, topic).get("laggard")
        assert entry is not None and entry["msgBacklog"] == 1, entry
        return entry

    eventually(back, what="the laggard subscribed again, not holding what it missed")
    receive_n(fast, 1, ack=True)
    caught_up()
    round_of(30, "d")  # 31 behind: within the limit
    assert dispatcher_stats(broker, topic)["dispatcher"]["lagDisconnects"] == 1
    assert dispatcher_stats(broker, topic)["msgBacklog"] == 31
    samples = labelled(broker, "magnetar_broadcast_lag_disconnects_total", "subscription")
    assert samples == {"fans": 1}
