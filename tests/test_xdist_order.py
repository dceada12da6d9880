"""The order of the files ``make test`` hands its xdist workers (tests/xdist_order.py)."""

from __future__ import annotations

from tests.xdist_order import estimate, is_slow, longest_first, slow_tests


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
