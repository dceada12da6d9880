"""The retry policy: what is retried, for how long, and the admin calls that use it (a real local
HTTP server and a closed port; no Spark session, no broker)."""

from __future__ import annotations

import http.server
import socket
import ssl
import threading
import time
import urllib.error
from collections.abc import Iterator

import pytest

from magnetar.client.admin import AdminClient, AdminError, ConflictError, NotFoundError, UnauthorizedError
from magnetar.client.errors import (
    ConnectError,
    ConnectionClosed,
    HttpPortError,
    ProducerBusy,
    ServiceNotReady,
    Timeout,
    TopicNotFound,
)
from magnetar.spark.admin import AdminUnreachableError, connect_admin
from magnetar.spark.errors import InvalidOptionError
from magnetar.spark.offsets import IndexRange
from magnetar.spark.options import ReadOptions, WriteOptions
from magnetar.spark.readers import _task
from magnetar.spark.retry import DEFAULT_RETRY_TIMEOUT_MS, RetryPolicy, is_transient
from magnetar.spark.security import ConnectionSecurity

FAST = {"first_wait_s": 0.001, "longest_wait_s": 0.02}


@pytest.mark.parametrize(
    "error",
    [
        ConnectionRefusedError(111, "refused"),
        ConnectionResetError(104, "reset"),
        TimeoutError("timed out"),
        urllib.error.URLError(ConnectionRefusedError(111, "refused")),
        AdminError(503, "service unavailable"),
        AdminError(500, "internal error"),
        ConnectError("no broker"),
        ConnectionClosed("closed while waiting"),
        Timeout("no answer"),
        ServiceNotReady("loading"),
    ],
    ids=repr,
)
def test_what_can_heal_is_retried(error):
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        NotFoundError(404, "no such topic"),
        UnauthorizedError(401, "bad token"),
        ConflictError(409, "no index"),
        AdminError(412, "precondition"),
        TopicNotFound("gone"),
        ProducerBusy("taken"),
        urllib.error.URLError("unknown url type: htp"),
        ssl.SSLCertVerificationError("certificate verify failed"),
        socket.gaierror(-2, "Name or service not known"),
        AdminUnreachableError("already retried"),
        InvalidOptionError("bad option"),
        HttpPortError("pulsar://127.0.0.1:8080 answered with HTTP"),
        ValueError("a bug"),
    ],
    ids=repr,
)
def test_refusals_and_verdicts_fail_at_once(error):
    assert not is_transient(error)


class Flaky:
    """Fails with ``error`` the first ``failures`` calls, then answers ``"ok"``."""

    def __init__(self, failures: int, error: BaseException) -> None:
        self.failures = failures
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return "ok"


def test_transient_failures_are_retried_until_success():
    flaky = Flaky(4, ConnectionRefusedError(111, "refused"))
    assert RetryPolicy(timeout_s=5, **FAST).call(flaky, "test") == "ok"
    assert flaky.calls == 5


def test_a_refusal_is_not_retried():
    flaky = Flaky(1, NotFoundError(404, "no such topic"))
    with pytest.raises(NotFoundError):
        RetryPolicy(timeout_s=5, **FAST).call(flaky, "test")
    assert flaky.calls == 1


def test_retries_stop_at_the_deadline_with_the_last_error():
    flaky = Flaky(10**9, ConnectionResetError(104, "reset"))
    began = time.monotonic()
    with pytest.raises(ConnectionResetError):
        RetryPolicy(timeout_s=0.5, first_wait_s=0.01, longest_wait_s=0.05).call(flaky, "test")
    took = time.monotonic() - began
    assert 0.4 <= took < 0.6  # no next attempt would start past the deadline
    assert flaky.calls > 3


def test_a_caller_may_say_what_else_heals():
    """The sink waits out ProducerBusy (an earlier attempt of its task still holds the producer
    name) under its own policy; the default policy fails it at once."""
    busy = Flaky(2, ProducerBusy("taken"))
    with pytest.raises(ProducerBusy):
        RetryPolicy(timeout_s=5, **FAST).call(busy, "test")
    waits_out_busy = RetryPolicy(timeout_s=5, **FAST)
    assert waits_out_busy.call(busy, "test", transient=lambda e: isinstance(e, ProducerBusy)) == "ok"
    assert busy.calls == 3


def test_zero_means_one_attempt():
    flaky = Flaky(1, ConnectionRefusedError(111, "refused"))
    with pytest.raises(ConnectionRefusedError):
        RetryPolicy(timeout_s=0).call(flaky, "test")
    assert flaky.calls == 1


def test_retry_timeout_option_reaches_planner_tasks_and_sink():
    base = {"topic": "t"}
    assert ReadOptions.parse(base, streaming=True).retry == RetryPolicy.of_ms(DEFAULT_RETRY_TIMEOUT_MS)
    assert DEFAULT_RETRY_TIMEOUT_MS >= 90_000  # a 45 s broker restart, with room
    opts = ReadOptions.parse({**base, "retryTimeoutMs": "5000"}, streaming=True)
    assert opts.retry.timeout_s == 5
    assert _task(opts, IndexRange(opts.selection.topics[0], 0, 10)).retry.timeout_s == 5
    assert WriteOptions.parse({**base, "RETRYTIMEOUTMS": "0"}).retry.timeout_s == 0
    for bad in ("-1", "soon"):
        with pytest.raises(InvalidOptionError, match="retryTimeoutMs"):
            ReadOptions.parse({**base, "retryTimeoutMs": bad}, streaming=False)


# -- the admin client with the policy, over real sockets -----------------------------------------------


class Answers(http.server.BaseHTTPRequestHandler):
    """Answers GETs with the next status of ``statuses`` (the last one repeats), counting them."""

    statuses: list[int] = []
    seen = 0

    def do_GET(self) -> None:
        cls = type(self)
        status = cls.statuses[min(cls.seen, len(cls.statuses) - 1)]
        cls.seen += 1
        body = b'{"partitions": 3}' if status == 200 else b'{"reason": "not now"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_answers() -> Iterator[type[Answers]]:
    handler = type("Handler", (Answers,), {"statuses": [200], "seen": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield handler
    server.shutdown()
    server.server_close()
    thread.join(5)


def admin_for(url: str, timeout_s: float) -> AdminClient:
    return connect_admin(url, ConnectionSecurity(), RetryPolicy(timeout_s=timeout_s, **FAST))


def test_admin_retries_503_then_answers(http_answers):
    http_answers.statuses = [503, 502, 200]
    assert admin_for(http_answers.url, 10).partition_count("persistent://public/default/t") == 3
    assert http_answers.seen == 3


def test_admin_does_not_retry_a_404(http_answers):
    http_answers.statuses = [404, 200]
    with pytest.raises(NotFoundError):
        admin_for(http_answers.url, 10).partition_count("persistent://public/default/t")
    assert http_answers.seen == 1


def test_admin_gives_up_on_a_closed_port_at_the_deadline():
    with socket.socket() as s:  # a port nobody listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    began = time.monotonic()
    with pytest.raises(AdminUnreachableError, match="retryTimeoutMs"):
        admin_for(f"http://127.0.0.1:{port}", 0.5).partition_count("persistent://public/default/t")
    assert 0.4 <= time.monotonic() - began < 5
