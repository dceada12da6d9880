"""The order in which ``make test`` hands test files to its two xdist workers: longest first.

xdist's ``loadfile`` sends the files with the most tests first, so the files of one or two long
tests (a restart, a soak, a benchmark smoke run) came last, and one worker ran them while the
other sat idle. The xdist controller collects nothing, so it cannot see markers; this module reads
them from the test files' source instead: a test marked ``slow`` (by its decorator, its class's or
its module's ``pytestmark``) takes seconds, any other a fraction of one (docs/testing.md), and a
file's estimate is the sum of its tests'. The files that run Spark go together, as one unit
(tests/conftest.py), and first: the longest unit of all.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

#: A rough estimate of a test marked ``slow`` and of any other, in seconds: only their ratio matters.
SLOW_S, QUICK_S = 5.0, 0.1

ROOT = Path(__file__).resolve().parent.parent


def _marks_slow(node: ast.expr) -> bool:
    """``pytest.mark.slow``, called or not, alone or in a list or tuple."""
    if isinstance(node, ast.List | ast.Tuple):
        return any(_marks_slow(e) for e in node.elts)
    if isinstance(node, ast.Call):
        node = node.func
    return isinstance(node, ast.Attribute) and node.attr == "slow"


def _pytestmark_slow(body: list[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in stmt.targets
        ):
            return _marks_slow(stmt.value)
    return False


def _decorated_slow(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> bool:
    return any(_marks_slow(d) for d in node.decorator_list)


@functools.cache
def slow_tests(path: str) -> frozenset[str]:
    """The names (``test_x``, ``TestY::test_x``) of the tests in ``path`` that are marked ``slow``;
    every name, ``*``, when the whole module is."""
    try:
        module = ast.parse((ROOT / path).read_text())
    except (OSError, SyntaxError, ValueError):
        return frozenset()
    if _pytestmark_slow(module.body):
        return frozenset({"*"})
    slow: set[str] = set()
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _decorated_slow(node):
            slow.add(node.name)
        elif isinstance(node, ast.ClassDef):
            whole = _decorated_slow(node) or _pytestmark_slow(node.body)
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    whole or _decorated_slow(item)
                ):
                    slow.add(f"{node.name}::{item.name}")
    return frozenset(slow)


def is_slow(nodeid: str) -> bool:
    path, _, name = nodeid.partition("::")
    slow = slow_tests(path)
    return "*" in slow or name.split("[", 1)[0] in slow


def estimate(scope: str, nodeids: list[str]) -> float:
    """Seconds a unit of work is expected to take, for ordering only; the Spark unit comes first."""
    if scope == "spark":
        return float("inf")
    return sum(SLOW_S if is_slow(n) else QUICK_S for n in nodeids)


def longest_first(units: dict[str, dict[str, bool]]) -> list[tuple[str, dict[str, bool]]]:
    """The units of work (scope -> its tests), the longest expected first; ties keep their order."""
    return sorted(units.items(), key=lambda unit: -estimate(unit[0], list(unit[1])))
