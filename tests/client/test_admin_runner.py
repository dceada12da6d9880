"""An ``AdminClient`` runner sees every HTTP exchange by name, may try one again, and may raise
its own error in place of the exchange's (what the Spark connector's retries are built on)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from magnetar.client.admin import AdminClient, ConflictError, NotFoundError

T = TypeVar("T")
TOPIC = "persistent://public/default/runner"

pytestmark = pytest.mark.interop


class Recorder:
    """Runs each exchange (twice when ``twice``) and keeps the names it was given."""

    def __init__(self, twice: bool = False) -> None:
        self.seen: list[str] = []
        self.twice = twice

    def __call__(self, exchange: Callable[[], T], what: str) -> T:
        self.seen.append(what)
        if self.twice:
            exchange()
        return exchange()


class Gone(Exception):
    pass


def test_every_exchange_passes_through_the_runner(broker) -> None:
    runner = Recorder()
    admin = AdminClient(broker.http_url, runner=runner)
    admin.create_partitioned_topic(TOPIC, 2)
    assert admin.partition_count(TOPIC) == 2
    body, _ = admin.request_bytes("GET", "/admin/v2/clusters")
    assert b"standalone" in body
    assert runner.seen == [
        "PUT /admin/v2/persistent/public/default/runner/partitions",
        "GET /admin/v2/persistent/public/default/runner/partitions",
        "GET /admin/v2/clusters",
    ]


def test_a_runner_may_repeat_an_exchange(broker) -> None:
    """Run twice, the idempotent call answers the same; the second create is refused (409), which
    shows the request really went out twice."""
    admin = AdminClient(broker.http_url, runner=Recorder(twice=True))
    assert admin.namespaces.list("public") == AdminClient(broker.http_url).namespaces.list("public")
    with pytest.raises(ConflictError):
        admin.tenants.create("twice")
    assert "twice" in AdminClient(broker.http_url).tenants.list()


def test_a_runner_may_raise_its_own_error(broker) -> None:
    def translate(exchange: Callable[[], T], what: str) -> T:
        try:
            return exchange()
        except NotFoundError as exc:
            raise Gone(f"{what}: {exc.reason}") from None

    admin = AdminClient(broker.http_url, runner=translate)
    with pytest.raises(Gone, match="GET /admin/v2/tenants/nowhere"):
        admin.tenants.get("nowhere")


def test_without_a_runner_each_exchange_is_tried_once(broker) -> None:
    with pytest.raises(NotFoundError):
        AdminClient(broker.http_url).tenants.get("nowhere")
