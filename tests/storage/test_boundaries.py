"""The storage layer stays free of the protocol and of asyncio."""

from __future__ import annotations

import ast
from pathlib import Path

import magnetar.storage

FORBIDDEN = ("asyncio", "magnetar.protocol", "magnetar.broker", "uvloop")


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_storage_imports_neither_asyncio_nor_the_protocol():
    package = Path(magnetar.storage.__file__).parent
    offenders = {
        f"{path.name}: {name}"
        for path in package.glob("*.py")
        for name in _imports(path)
        if any(name == bad or name.startswith(bad + ".") for bad in FORBIDDEN)
    }
    assert offenders == set()
