"""The xdist scheduler of ``make test``: ``--dist loadfile``, the longest units first, and a run
that goes on after a worker dies.

xdist 3.8's ``LoadScopeScheduling`` stalls for good once a worker dies mid-file (pytest-timeout's
thread method ends a hung test's worker with ``os._exit``): its ``remove_node`` queues the dead
worker's whole workload again, the files it had finished too, and a worker handed such a file is
sent no test, so none completes, nothing asks for more work, and the controller waits forever with
the rest of the queue unrun. It would also run the crashed test again, on the next worker, which
hangs or dies in turn. Here only the tests the dead worker had not run are queued, first, and its
crashed test, which xdist has already reported as failed, is not among them.

A worker runs a test only once it holds the next one or is told to shut down (so that a fixture's
teardown knows what comes next). xdist tops a worker up with one unit at a time, and gives the
replacement of a dead worker one unit: when that unit is one test (the last of a file the dead
worker was in), the replacement holds it, never runs it, and the run stalls again. Here a worker is
topped up until it holds more than two tests or the queue is empty, and then told to shut down.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

from tests.xdist_order import longest_first


class LongestFirst(LoadScopeScheduling):
    """A test file a unit (``loadfile``), the longest expected first (tests/xdist_order.py)."""

    ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return nodeid.split("::", 1)[0]

    def _assign_work_unit(self, node: Any) -> None:
        if not self.ordered:  # the queue is whole by the first assignment
            self.ordered = True
            units = longest_first(dict(self.workqueue))
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()

    def remove_node(self, node: Any) -> str | None:
        """Forget a worker that finished or died; return the test a dead one was running, which
        xdist then reports as failed, and queue, ahead of the rest, the tests it had yet to run."""
        workload = self.assigned_work.pop(node)  # a KeyError is xdist's: a node never added
        pending = [nodeid for unit in workload.values() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        # A worker runs its tests in the order they were sent: the first one not done is the one it
        # was running, as xdist's own remove_node assumes.
        crashed = pending[0]
        workload[self._split_scope(crashed)][crashed] = True
        left = [(scope, unit) for scope, unit in workload.items() if not all(unit.values())]
        for scope, unit in reversed(left):
            self.workqueue[scope] = unit
            self.workqueue.move_to_end(scope, last=False)
        for other in self.nodes:
            self._reschedule(other)
        return crashed
