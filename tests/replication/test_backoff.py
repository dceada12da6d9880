"""The replicator's wait between tries: it grows while the copy is stuck (an entry the remote
refuses, a remote away) and starts over once the copy got on."""

from magnetar.replication.replicator import FIRST_BACKOFF_S, MAX_BACKOFF_S, next_backoff


def test_the_first_failure_waits_the_first_backoff() -> None:
    assert next_backoff(0.0, progressed=False) == FIRST_BACKOFF_S


def test_failures_without_progress_double_the_wait_up_to_the_maximum() -> None:
    waits = [FIRST_BACKOFF_S]
    for _ in range(20):
        waits.append(next_backoff(waits[-1], progressed=False))
    assert waits[:3] == [FIRST_BACKOFF_S, 2 * FIRST_BACKOFF_S, 4 * FIRST_BACKOFF_S]
    assert waits[-1] == MAX_BACKOFF_S


def test_progress_since_the_last_failure_starts_over() -> None:
    assert next_backoff(MAX_BACKOFF_S, progressed=True) == FIRST_BACKOFF_S
