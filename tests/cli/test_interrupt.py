"""Ctrl-C in the consume and read loops: the first one a request seen between messages, the second
one an interrupt, and a SIGINT ignored from the start left ignored."""

from __future__ import annotations

import signal

import pytest

from magnetar.cli.interrupt import stop_on_ctrl_c


@pytest.fixture(autouse=True)
def python_s_own_ctrl_c():
    """Python's default SIGINT handler, as a command starts with: a test process may hold another
    (PySpark's SparkContext installs its own in the xdist worker that ran the Spark tests)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_the_first_ctrl_c_sets_the_event_and_the_second_one_interrupts():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with stop_on_ctrl_c() as stopped:
        assert not stopped.is_set()
        signal.raise_signal(signal.SIGINT)  # runs the handler before it returns
        assert stopped.is_set()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_the_handler_before_is_back_after_the_block_without_a_ctrl_c():
    with stop_on_ctrl_c() as stopped:
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    assert not stopped.is_set()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with stop_on_ctrl_c() as stopped:
            signal.raise_signal(signal.SIGINT)
            assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert not stopped.is_set()
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
