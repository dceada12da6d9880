"""The order of the files ``make test`` hands its xdist workers (tests/xdist_order.py), and a run
that goes on when one dies (tests/xdist_scheduler.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.xdist_order import ROOT, estimate, is_slow, longest_first, slow_tests


def test_a_module_marked_slow_makes_every_test_slow():
    assert slow_tests("tests/interop/test_ack_state.py") == frozenset({"*"})  # pytestmark = [..., slow]
    assert is_slow("tests/interop/test_ack_state.py::test_anything[param]")


def test_a_test_marked_slow_is_slow_and_its_neighbours_are_not():
    path = "tests/interop/test_pattern_subscriptions.py"
    assert is_slow(f"{path}::test_a_regex_subscription_finds_a_topic_made_later")
    assert not is_slow(f"{path}::polling_every")
    assert not is_slow("tests/test_waiting.py::test_returns_the_first_truthy_value")


def test_a_missing_file_has_no_slow_tests():
    assert slow_tests("tests/no_such_file.py") == frozenset()


def test_the_spark_unit_then_the_longest_files_go_first():
    units = {
        "tests/test_waiting.py": dict.fromkeys([f"tests/test_waiting.py::t{i}" for i in range(40)], False),
        "tests/interop/test_ack_state.py": {"tests/interop/test_ack_state.py::t": False},
        "spark": {"tests/spark/test_x.py::t": False},
    }
    order = [scope for scope, _ in longest_first(units)]
    assert order == ["spark", "tests/interop/test_ack_state.py", "tests/test_waiting.py"]
    slow, quick = "tests/interop/test_ack_state.py::t", "tests/test_waiting.py::t"
    assert estimate("x", [slow]) > estimate("x", [quick] * 40) > estimate("x", [quick])


def _run_suite(tmp_path: Path, files: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run a suite of ``files`` on two xdist workers under ``make test``'s scheduler and hang
    dumps, in a process of its own; a run that stalls fails the test at the timeout instead of
    hanging it."""
    (tmp_path / "conftest.py").write_text(
        "import pytest\n"
        "from tests import hang_dumps\n\n\n"
        "def pytest_xdist_make_scheduler(config, log):\n"
        "    from tests.xdist_scheduler import LongestFirst\n"
        "    return LongestFirst(config, log)\n\n\n"
        "def pytest_configure(config):\n"
        "    hang_dumps.start(config)\n\n\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_protocol(item):\n"
        "    with hang_dumps.armed(item):\n"
        "        yield\n\n\n"
        "def pytest_terminal_summary(terminalreporter):\n"
        "    hang_dumps.report(terminalreporter)\n"
    )
    for name, source in files.items():
        (tmp_path / name).write_text(source)
    # Not this run's xdist worker's settings: the suite's own controller makes its own.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "PYTEST_HANG_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "src")])
    pytest_args = ["-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "-rf", *args]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *pytest_args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


QUICK = "def test_1():\n    pass\n\n\ndef test_2():\n    pass\n\n\ndef test_3():\n    pass\n"


@pytest.mark.slow  # two worker processes and a third, ~2.5 s
@pytest.mark.parametrize("crash_at", [0, 2, 4])
def test_a_run_goes_on_after_a_worker_dies(tmp_path, crash_at):
    """A test that ends its worker (as pytest-timeout's thread method does a hung one) fails, and
    every other test still runs: xdist's own loadfile queued the dead worker's finished files again
    and left the run waiting forever (tests/xdist_scheduler.py)."""
    tests = [f"def test_{i}():\n    pass\n" for i in range(5)]
    tests[crash_at] = f"def test_{crash_at}():\n    os._exit(1)\n"
    files = {f"test_{name}.py": QUICK for name in "abcdef"}
    files["test_crash.py"] = "import os\n\n\n" + "\n\n".join(tests)
    result = _run_suite(tmp_path, files)
    assert f"FAILED test_crash.py::test_{crash_at} - worker 'gw" in result.stdout, result.stdout
    assert "1 failed, 22 passed" in result.stdout, result.stdout
    assert result.returncode == 1


@pytest.mark.slow  # two worker processes and a test that hangs for its 3 s timeout
def test_a_hung_tests_stacks_are_shown_though_its_worker_died(tmp_path):
    """pytest-timeout's thread method ends a hung test's worker, whose own stack dump xdist does
    not show: the worker's file written halfway (tests/hang_dumps.py) is, at the end of the run."""
    hang = (
        "import threading\n\nimport pytest\n\n\n"
        "@pytest.mark.timeout(3)\n"
        "def test_hangs():\n    threading.Event().wait(60)  # waits here\n"
    )
    result = _run_suite(tmp_path, {"test_a.py": QUICK, "test_hang.py": hang}, "-o", "timeout_method=thread")
    assert "FAILED test_hang.py::test_hangs - worker 'gw" in result.stdout, result.stdout
    assert "stacks of a test that hung" in result.stdout, result.stdout
    assert "test_hang.py::test_hangs: every thread's stack 1.5 s into the test" in result.stdout
    assert 'test_hang.py", line 8 in test_hangs' in result.stdout, result.stdout
    assert "3 passed" in result.stdout
