"""The web console in a real headless browser (Debian's chromium, driven by Playwright) against a
real broker process and the official pulsar-client: a token login (a wrong token refused), a
topic the client produced to listed and its rate moving, a cursor reset through the console that
the client's consumer sees, a role without admin rights offered no action (and refused if it
tries one anyway), and a namespace of 10,000 topics paged and searched.
"""

from __future__ import annotations

import base64
import re
import threading
import time

import pulsar
import pytest

from magnetar.security import tokens
from tests.console.many_topics import write_partitioned_topics
from tests.interop.conftest import CLIENT_LOGGER
from tests.interop.support import receive_n
from tests.waiting import eventually

pytestmark = pytest.mark.interop


def console_url(broker, view: str = "") -> str:
    return f"{broker.http_url}/console/{view}"


def number(page, selector: str) -> float:
    text = page.locator(selector).inner_text()
    return float(text.replace(",", "")) if text[:1].isdigit() else 0.0


@pytest.fixture
def secured(broker_factory):
    """(broker, token of a role): token authentication and authorization, superuser ``root``."""
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


def log_in(page, broker, token: str) -> None:
    page.goto(console_url(broker))
    page.fill("#token", token)
    page.click("#login button[type=submit]")


def test_a_token_logs_in_and_a_wrong_one_is_refused(page, secured):
    broker, token_of = secured
    page.goto(console_url(broker))
    page.wait_for_selector("#login")
    assert page.locator("#login-error").count() == 0  # nothing refused before a token was typed
    page.fill("#token", "not-a-token")
    page.click("#login button[type=submit]")
    page.wait_for_selector("#login-error")
    assert "Refused" in page.locator("#login-error").inner_text()
    assert page.locator("#connections").count() == 0

    root = token_of("root")  # made once: a token made a second later expires a second later
    page.fill("#token", root)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#connections")
    assert page.locator("#who .role").inner_text() == "root"
    assert page.locator("#who .badge").inner_text() == "superuser"
    assert page.evaluate("sessionStorage.getItem('magnetar.console.token')") == root
    page.click("#logout")
    page.wait_for_selector("#login")
    assert page.evaluate("sessionStorage.getItem('magnetar.console.token')") is None


@pytest.mark.slow  # the rate is worked out between polls, 2 s apart: two to see it rise, two to fall
def test_a_produced_topic_is_listed_and_its_rate_moves(page, broker, client_factory, topic):
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "watchers")
    for i in range(5):
        producer.send(f"reading {i}: 21.5 °C".encode())
    local = topic.rsplit("/", 1)[1]

    page.goto(console_url(broker))
    page.wait_for_selector("#connections")
    assert page.locator("#disk-health").inner_text() == "writable"
    assert page.locator("#workers-count").inner_text() == "1"

    page.goto(console_url(broker, "#/topics"))
    page.fill("#search", local)
    link = page.locator("#topics a.topic-link", has_text=local)
    link.wait_for()
    assert page.locator("#topics tbody tr").count() == 1
    link.click()
    page.wait_for_selector("#subscriptions-table")
    assert page.locator("#subscriptions-table").inner_text().count("watchers") == 1

    sending = threading.Event()
    sending.set()

    def produce() -> None:
        while sending.is_set():
            producer.send(b"steady")
            time.sleep(0.02)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        eventually(lambda: number(page, "#topic-rate-in") > 5, what="the console's rate in above 5 msg/s")
        assert page.locator("#topic-charts polyline.series-in").count() == 1
    finally:
        sending.clear()
        thread.join()
    eventually(lambda: number(page, "#topic-rate-in") == 0, what="the console's rate in back to 0")

    # the last messages, as text and as hex
    page.select_option("#peek-subscription", "watchers")
    page.click("#peek-button")
    page.wait_for_selector("#peek-table")
    assert "reading 0: 21.5 °C" in page.locator("#peek-table").inner_text()
    page.select_option("#peek-format", "hex")
    assert "72 65 61 64 69 6e 67 20 30" in page.locator("#peek-table").inner_text()  # "reading 0"
    page.click("#show-internal")
    eventually(lambda: '"cursors"' in page.locator("#internal-stats").inner_text(), what="internal stats")
    consumer.close()


@pytest.mark.slow
def test_a_cursor_reset_through_the_console_is_seen_by_the_client(page, broker, client_factory, topic):
    client = client_factory(broker.service_url)
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, "replayed")
    payloads = [b"event-%d" % i for i in range(10)]
    for payload in payloads:
        producer.send(payload)
    assert [m.data() for m in receive_n(consumer, 10, ack=True)] == payloads
    local = topic.rsplit("/", 1)[1]

    page.goto(console_url(broker, f"#/topic/persistent/public/default/{local}"))
    row = page.locator("#subscriptions-table tr", has_text="replayed")
    eventually(lambda: row.locator("td").nth(2).inner_text() == "0", what="the backlog shown as 0")
    row.locator("a.show-consumers").click()
    page.wait_for_selector("#consumers-table")
    assert page.locator("#consumers-table tbody tr").count() == 1

    row.locator("button.reset-cursor").click()
    page.wait_for_selector("#confirm[open]")
    assert "replayed" in page.locator("#confirm-text").inner_text()
    page.fill("#reset-minutes", "0")  # to the earliest message
    page.click("#confirm-ok")
    page.wait_for_selector("#status.ok")
    assert [m.data() for m in receive_n(consumer, 10, ack=True)] == payloads

    # a cancelled action does nothing
    producer.send(b"after")
    assert receive_n(consumer, 1)[0].data() == b"after"
    row.locator("button.clear-backlog").click()
    page.click("#confirm-cancel")
    eventually(lambda: row.locator("td").nth(2).inner_text() == "1", what="the unacknowledged message kept")


def test_a_role_without_admin_rights_is_offered_no_action_and_refused_one(page, secured, client_factory):
    broker, token_of = secured
    root = token_of("root")
    topic = "persistent://public/default/watched"
    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(root),
        operation_timeout_seconds=10,
        logger=CLIENT_LOGGER,
    )
    try:
        client.create_producer(topic).send(b"x")
        client.subscribe(topic, "s").close()
    finally:
        client.close()
    log_in(page, broker, root)
    page.wait_for_selector("#connections")
    page.evaluate(
        """async () => (await fetch('/admin/v2/namespaces/public/default/permissions/viewer', {method: 'POST',
        headers: {Authorization: 'Bearer ' + sessionStorage.getItem('magnetar.console.token'),
        'Content-Type': 'application/json'}, body: '["consume"]'})).status"""
    )
    page.click("#logout")

    log_in(page, broker, token_of("viewer"))
    page.wait_for_selector("#connections")
    assert page.locator("#who .badge").inner_text() == "read-only"
    page.goto(console_url(broker, "#/topics"))
    page.locator("#topics a.topic-link", has_text="watched").wait_for()
    assert page.locator("#create-topic").count() == 0
    page.goto(console_url(broker, "#/topic/persistent/public/default/watched"))
    page.wait_for_selector("#subscriptions-table")
    page.wait_for_selector("#read-only")
    for action in ("#unload", "#compact", "#offload", "button.reset-cursor", "button.unsubscribe"):
        assert page.locator(action).count() == 0, action
    # and the broker refuses what the page does not offer
    refused = page.evaluate(
        """async () => {
        const auth = {Authorization: 'Bearer ' + sessionStorage.getItem('magnetar.console.token')};
        const base = '/admin/v2/persistent/public/default';
        const create = await fetch(base + '/made-by-viewer', {method: 'PUT', headers: auth});
        const compact = await fetch(base + '/watched/compaction', {method: 'PUT', headers: auth});
        return [create.status, compact.status];
        }"""
    )
    assert refused == [403, 403]


@pytest.mark.slow
def test_ten_thousand_topics_are_paged_and_searched(page, broker_factory, capsys):
    broker = broker_factory()
    broker.stop()
    names = [f"persistent://public/default/sensor-{i:05d}" for i in range(10_000)]
    write_partitioned_topics(broker.data_dir, names)
    broker.start()

    started = time.monotonic()
    page.goto(console_url(broker, "#/topics?ns=public/default&limit=50"))
    summary = page.locator("#topics-summary")
    eventually(lambda: summary.inner_text().startswith("10,000 topics"), what="10,000 topics listed")
    first_page = time.monotonic() - started
    assert page.locator("#topics tbody tr").count() == 50
    assert page.locator("#topics a.topic-link").first.inner_text() == "sensor-00000"

    page.click("#next-page")
    eventually(
        lambda: page.locator("#topics a.topic-link").first.inner_text() == "sensor-00050", what="page 2"
    )
    assert page.locator("#page-number").inner_text() == "page 2 of 200"

    started = time.monotonic()
    page.fill("#search", "sensor-0421")
    eventually(lambda: re.match(r"10 topics matching", summary.inner_text()), what="the search's 10 topics")
    searched = time.monotonic() - started
    shown = page.locator("#topics a.topic-link").all_inner_texts()
    assert shown == [f"sensor-0421{i}" for i in range(10)]
    with capsys.disabled():
        print(
            f"\n10,000 topics: first page shown {first_page:.2f} s after load,"
            f" a search {searched:.2f} s after typing (250 ms of it the page's pause for more keys)"
        )
