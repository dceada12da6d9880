"""``magnetar produce / consume / read`` as a user runs them: child processes against a real broker,
cross-checked with the official pulsar-client."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.interop.support import admin_call
from tests.waiting import eventually

from .conftest import magnetar

pytestmark = pytest.mark.interop


def ok(*args: str) -> tuple[str, str]:
    done = magnetar(*args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout, done.stderr


def stats_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/") + "/stats"


def subscriptions(broker, topic: str) -> dict:
    """The topic's subscriptions as the admin API lists them ({} while the topic does not exist)."""
    status, stats = admin_call(broker, "GET", stats_path(topic))
    return stats["subscriptions"] if status == 200 else {}


def backlog(broker, topic: str, sub: str) -> int:
    status, stats = admin_call(broker, "GET", stats_path(topic))
    assert status == 200, stats
    return stats["subscriptions"][sub]["msgBacklog"]


def test_produce_then_consume_round_trip_acknowledges_what_it_printed(broker, topic):
    out, _ = ok(
        "produce", topic, "-m", "hello", "-m", "world", "-n", "2", "--service-url", broker.service_url
    )
    assert re.fullmatch(
        rf"4 messages successfully produced to {re.escape(topic)} in [0-9.]+ s \(.+ msg/s\)\n", out
    )
    out, err = ok("consume", topic, "-s", "sub", "--from", "earliest", "-n", "4", "--url", broker.service_url)
    assert out.splitlines() == ["hello", "world", "hello", "world"]
    assert err.strip() == f"4 messages consumed from {topic}"
    eventually(lambda: backlog(broker, topic, "sub") == 0, what="the consumer's acknowledgements")


def test_consume_json_carries_key_properties_and_payload(broker, topic):
    url = broker.service_url
    ok("produce", topic, "-m", "café", "-k", "car-7", "-p", "colour=red", "-p", "eq=a=b", "--url", url)
    ok("produce", topic, "-f", __file__, "--url", url)
    out, _ = ok(
        "consume", topic, "-s", "s", "-t", "Shared", "--from", "earliest", "-n", "2", "--json", "--url", url
    )
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["payload"] == "café" and first["key"] == "car-7"
    assert first["properties"] == {"colour": "red", "eq": "a=b"}
    assert re.fullmatch(r"\d+:\d+:-1", first["id"]) and first["publish_time"] > 0
    with open(__file__, encoding="utf-8") as f:
        assert second["payload"] == f.read() and second["key"] is None and second["properties"] == {}


def test_read_from_earliest_and_after_a_printed_id_leaves_no_backlog_behind(broker, topic):
    url = broker.service_url
    ok("produce", topic, "-m", "a", "-m", "b", "-m", "c", "--url", url)
    out, err = ok("read", topic, "--start-message-id", "earliest", "-n", "3", "--json", "--url", url)
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["payload"] for r in records] == ["a", "b", "c"]
    assert err.strip() == f"3 messages read from {topic}"
    out, _ = ok("read", topic, "--start-message-id", records[0]["id"], "-n", "2", "--hex", "--url", url)
    assert out.splitlines() == [b"b".hex(), b"c".hex()]  # a reader starts after the id it is given
    status, stats = admin_call(broker, "GET", stats_path(topic))
    assert status == 200 and all(
        name.startswith("reader-") for name in stats["subscriptions"]
    )  # no durable one


def test_the_official_client_receives_what_magnetar_produce_sent(broker, client, topic):
    consumer = client.subscribe(topic, "official")
    ok("produce", topic, "-m", "one", "-m", "two", "-k", "k", "-p", "x=1", "--url", broker.service_url)
    received = [consumer.receive(10_000) for _ in range(2)]
    assert [m.data() for m in received] == [b"one", b"two"]
    assert all(m.partition_key() == "k" and m.properties() == {"x": "1"} for m in received)


def test_a_chunked_message_larger_than_the_broker_limit_arrives_whole(
    broker_factory, client_factory, topic, tmp_path
):
    broker = broker_factory({"max_message_size": 10_000})
    consumer = client_factory(broker.service_url).subscribe(topic, "official")
    big = tmp_path / "big.bin"
    big.write_bytes(bytes(range(256)) * 200)  # 51,200 bytes: six chunks
    refused = magnetar("produce", topic, "-f", str(big), "--url", broker.service_url)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    ok("produce", topic, "-f", str(big), "--chunking", "--url", broker.service_url)
    assert consumer.receive(10_000).data() == big.read_bytes()


def test_produce_keeps_to_the_rate(broker, topic):
    out, _ = ok("produce", topic, "-m", "x", "-n", "10", "-r", "50", "--url", broker.service_url)
    seconds = float(re.search(r" in ([0-9.]+) s ", out).group(1))
    assert seconds >= 9 / 50  # the tenth send is due 0.18 s after the first


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "command",
    [
        ["produce", "t", "-m", "x"],
        ["consume", "t", "-s", "s"],
        ["read", "t", "--start-message-id", "earliest"],
    ],
)
def test_an_unreachable_broker_gives_one_line_and_exit_code_1(command):
    # well inside the client's 30 s operation timeout: a refused connection is not retried
    done = magnetar(*command, "--service-url", f"pulsar://127.0.0.1:{unused_port()}", timeout=15)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "cannot connect" in lines[0], done.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["produce", "t", "-m", "x", "--no-such-flag"],
        ["produce", "t"],  # neither -m nor -f
        ["produce", "t", "-m", "x", "-f", __file__],
        ["produce", "t", "-m", "x", "-p", "novalue"],
        ["produce", "t", "-m", "x", "-n", "0"],
        ["consume", "t"],  # -s is required
        ["consume", "t", "-s", "s", "-t", "Sometimes"],
        ["read", "t", "--start-message-id", "soon"],
        ["frobnicate"],
    ],
)
def test_bad_flags_are_usage_errors_with_exit_code_2(command):
    done = magnetar(*command)
    assert done.returncode == 2, done.stderr
    assert "Usage: magnetar" in done.stderr and "Traceback" not in done.stderr


def test_an_auth_token_is_passed_and_a_refused_one_is_one_line(broker_factory, topic, tmp_path):
    from magnetar.security import tokens
    from tests.interop.test_token_auth import secret_broker

    key = tokens.create_secret_key()
    broker = secret_broker(broker_factory, key)
    token_file = tmp_path / "token"
    token_file.write_text(tokens.create_token(key, "alice") + "\n")
    url = broker.service_url
    ok("produce", topic, "-m", "signed", "--auth-token", tokens.create_token(key, "alice"), "--url", url)
    out, _ = ok("read", topic, "-m", "earliest", "--auth-token", f"file://{token_file}", "--url", url)
    assert out == "signed\n"
    refused = magnetar("produce", topic, "-m", "x", "--url", url)  # no token
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


def ignores_sigint(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGINT, as one started by a background job of a script does
    (Linux: its ``SigIgn`` mask; a run with SIGINT ignored would otherwise hang here for 30 s)."""
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return False
    mask = next(line.split()[1] for line in status.read_text().splitlines() if line.startswith("SigIgn:"))
    return bool(int(mask, 16) & (1 << (signal.SIGINT - 1)))


def test_consume_without_a_count_runs_until_ctrl_c_and_then_exits_cleanly(broker, topic):
    url = broker.service_url
    # -X faulthandler: should it hang after Ctrl-C, SIGABRT makes it print where each thread is.
    command = [sys.executable, "-X", "faulthandler", "-m", "magnetar", "consume", topic, "-s", "tail"]
    command += ["-n", "0", "--url", url]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            # the subscription exists once the broker lists it: produce only then (it starts at latest)
            eventually(
                lambda: "tail" in subscriptions(broker, topic), what="the consume command's subscription"
            )
            ok("produce", topic, "-m", "a", "-m", "b", "--url", url)
            assert proc.stdout.readline() == "a\n" and proc.stdout.readline() == "b\n"
            assert not ignores_sigint(proc.pid), "started with SIGINT ignored: Ctrl-C cannot reach it"
            proc.send_signal(signal.SIGINT)
            try:
                rc = proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)
                _, stacks = proc.communicate(timeout=10)
                pytest.fail(f"still running 30 s after Ctrl-C; its threads:\n{stacks[-8000:]}")
            err = proc.stderr.read()
        finally:
            proc.kill()
    assert rc == 0, err
    assert err.strip() == f"2 messages consumed from {topic}"


def test_reading_a_partitioned_topic_names_its_partitions(broker, topic):
    status, _ = admin_call(broker, "PUT", stats_path(topic).replace("/stats", "/partitions"), 2)
    assert status in (200, 204)
    done = magnetar("read", topic, "-m", "earliest", "--url", broker.service_url)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert f"has 2 partitions: read one of them ({topic}-partition-0" in done.stderr


def test_tls_with_the_trusted_ca_and_an_untrusted_certificate_refused(broker_factory, tls_files, topic):
    from tests.interop.tls_certs import tls_settings

    broker = broker_factory(tls_settings(tls_files))
    url = broker.service_url_tls
    ok("produce", topic, "-m", "sealed", "--url", url, "--tls-trust-certs-file-path", str(tls_files.ca))
    out, _ = ok("read", topic, "-m", "earliest", "--url", url, "--tls-allow-insecure-connection")
    assert out == "sealed\n"
    wrong = magnetar(
        "read", topic, "-m", "earliest", "--url", url, "--tls-trust-certs-file-path", str(tls_files.wrong_ca)
    )
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
