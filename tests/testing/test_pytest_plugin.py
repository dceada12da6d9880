"""The ``magnetar_broker`` fixture as a user gets it: a small user test file run by a pytest of its own.

Each run is a subprocess ``pytest`` with plugin autoloading off, so that nothing of this suite (its
conftest, its plugins) is in it: once by ``-p magnetar.testing.pytest_plugin``, once through the
``pytest11`` entry point that pyproject.toml declares, made visible by a throwaway ``.dist-info``
(nothing is installed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "magnetar.testing.pytest_plugin"

# The user's suite: a round trip with the official client, the admin API, one broker for the whole
# session, and no broker for a test that does not ask for one. It prints what the outer test checks
# once the run is over: the broker's PID and data directory.
USER_TESTS = '''
import json, os, urllib.request
from pathlib import Path

import pulsar

TOPIC = "persistent://public/default/user-suite"
SEEN = []


def _children():
    """The PIDs of this pytest's child processes (Linux: /proc)."""
    pids = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        pids |= {int(p) for p in (task / "children").read_text().split()}
    return pids


def test_a_test_without_the_fixture_starts_no_broker():
    assert _children() == set()


def test_round_trip(magnetar_broker):
    assert magnetar_broker.pid in _children()
    client = pulsar.Client(magnetar_broker.service_url)
    try:
        consumer = client.subscribe(TOPIC, "sub")
        producer = client.create_producer(TOPIC)
        producer.send(b"hello")
        msg = consumer.receive(10_000)
        consumer.acknowledge(msg)
        assert msg.data() == b"hello"
    finally:
        client.close()
    SEEN.append(magnetar_broker)
    print(f"BROKER pid={magnetar_broker.pid} data_dir={magnetar_broker.data_dir}")


def test_admin_url_answers_from_the_same_broker(magnetar_broker):
    assert SEEN == [magnetar_broker]  # session scope: the broker of the test before
    with urllib.request.urlopen(magnetar_broker.admin_url + "/admin/v2/persistent/public/default") as r:
        assert TOPIC in json.loads(r.read())
'''


def _pytest(
    suite: Path,
    *args: str,
    autoload: bool = False,
    path: tuple[Path, ...] = (),
    tests: str = USER_TESTS,
    ini: str = "",
) -> subprocess.CompletedProcess[str]:
    """A pytest of its own on ``tests`` in ``suite`` (cwd and rootdir: no conftest of ours above it)."""
    (suite / "test_user.py").write_text(tests)
    (suite / "pytest.ini").write_text(f"[pytest]\n{ini}")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(map(str, [ROOT / "src", *path]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args, "test_user.py"],
        cwd=suite,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _passed(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "3 passed" in output, output
    return output


def _assert_broker_gone(output: str) -> None:
    line = next(line for line in output.splitlines() if "BROKER pid=" in line)
    pid = int(line.split("pid=")[1].split()[0])
    data_dir = Path(line.split("data_dir=")[1].strip())
    assert not data_dir.exists()
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"the broker {pid} outlived the user's pytest run")


def test_the_plugin_by_name(tmp_path):
    _assert_broker_gone(_passed(_pytest(tmp_path, "-p", PLUGIN)))


def test_the_plugin_through_the_entry_point_pyproject_declares(tmp_path):
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert declared == {"magnetar": PLUGIN}
    site = tmp_path / "site"
    dist_info = site / "magnetar_plugin_probe-0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: magnetar-plugin-probe\nVersion: 0\n")
    entry_points = "[pytest11]\n" + "".join(f"{name} = {module}\n" for name, module in declared.items())
    (dist_info / "entry_points.txt").write_text(entry_points)
    suite = tmp_path / "suite"
    suite.mkdir()
    _assert_broker_gone(_passed(_pytest(suite, autoload=True, path=(site,))))


def test_without_the_plugin_the_fixture_is_unknown(tmp_path):
    """The wiring above is what brings the fixture: without it, the user's suite cannot run."""
    result = _pytest(tmp_path)
    assert result.returncode != 0
    assert "fixture 'magnetar_broker' not found" in result.stdout


FUNCTION_SCOPED_TESTS = """
PIDS = []


def test_one(magnetar_broker):
    PIDS.append(magnetar_broker.pid)


def test_two(magnetar_broker):
    PIDS.append(magnetar_broker.pid)
    assert len(set(PIDS)) == 2, PIDS
"""


def test_the_ini_option_picks_a_broker_per_test(tmp_path):
    result = _pytest(
        tmp_path, "-p", PLUGIN, tests=FUNCTION_SCOPED_TESTS, ini="magnetar_broker_scope = function\n"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_a_wrong_scope_is_an_error_naming_the_option(tmp_path):
    result = _pytest(
        tmp_path, "-p", PLUGIN, tests=FUNCTION_SCOPED_TESTS, ini="magnetar_broker_scope = suite\n"
    )
    assert result.returncode != 0
    assert "magnetar_broker_scope = 'suite'" in result.stdout + result.stderr


SETTINGS_CONFTEST = """
import pytest


@pytest.fixture(scope="session")
def magnetar_broker_settings():
    return {"max_message_size": 128 * 1024}
"""

SETTINGS_TESTS = """
import pulsar
import pytest
from pulsar.exceptions import MessageTooBig


def test_the_suites_settings_reach_the_broker(magnetar_broker):
    client = pulsar.Client(magnetar_broker.service_url)
    try:
        producer = client.create_producer("persistent://public/default/limits", batching_enabled=False)
        producer.send(b"x" * 1024)
        with pytest.raises(MessageTooBig):
            producer.send(b"x" * (128 * 1024 + 1))
    finally:
        client.close()
"""


def test_a_conftest_overrides_the_settings(tmp_path):
    (tmp_path / "conftest.py").write_text(SETTINGS_CONFTEST)
    result = _pytest(tmp_path, "-p", PLUGIN, tests=SETTINGS_TESTS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
