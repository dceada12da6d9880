"""The protocol layer does no I/O: no module under magnetar/protocol imports an I/O or event-loop library."""

from __future__ import annotations

import ast
from pathlib import Path

import magnetar.protocol

FORBIDDEN = {"asyncio", "socket", "ssl", "selectors", "uvloop", "trio", "anyio"}
PROTOCOL_DIR = Path(magnetar.protocol.__file__).parent


def imported_modules(source: str) -> set[str]:
    """Top-level names of every module the source imports, statically or through importlib/__import__."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in {"import_module", "__import__"} and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return {name.split(".")[0] for name in found}


def test_detector_sees_every_kind_of_import():
    source = "\n".join(
        [
            "import os, asyncio.events",
            "from socket import socket",
            "importlib.import_module('ssl')",
            "__import__('trio')",
        ]
    )
    assert imported_modules(source) >= {"asyncio", "socket", "ssl", "trio", "os"}


def test_protocol_modules_import_no_io():
    modules = sorted(PROTOCOL_DIR.rglob("*.py"))
    assert len(modules) >= 7, modules  # __init__, errors, frames, headers, entry, batch, commands
    offenders = {path.name: sorted(imported_modules(path.read_text()) & FORBIDDEN) for path in modules}
    assert {name: bad for name, bad in offenders.items() if bad} == {}
