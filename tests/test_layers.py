"""The house keeps its plan: the layers of docs/architecture.md (import-linter's contracts in
pyproject.toml) and no module changing another module's classes behind its back."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"


def _lint_imports() -> str:
    """The ``lint-imports`` next to this interpreter (the venv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "lint-imports"
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    assert found, "lint-imports not found: install the dev extra (import-linter)"
    return found


def test_each_layer_imports_only_the_layers_below_it():
    paths = [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    result = subprocess.run(
        [_lint_imports(), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"import contracts broken:\n{report}"
    assert "0 broken" in report and " kept" in report


def _imported_names(tree: ast.Module) -> set[str]:
    """The names a module binds by importing: ``from m import C`` binds C, ``import a.b`` binds a."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.asname or alias.name.partition(".")[0] for alias in node.names)
    return names


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def patches(source: str) -> list[tuple[int, str]]:
    """(line, code) of each assignment to (or deletion of) an attribute of something imported:
    ``Imported.attr = ...``, ``module.Class.attr += ...``, ``del Imported.attr``,
    ``setattr(Imported, ...)``."""
    tree = ast.parse(source)
    imported = _imported_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
            and _root_name(node.args[0]) in imported
        ):
            found.append((node.lineno, ast.unparse(node)))
        flat = []
        for target in targets:
            flat.extend(target.elts if isinstance(target, ast.Tuple | ast.List) else [target])
        for target in flat:
            if isinstance(target, ast.Attribute) and _root_name(target) in imported:
                found.append((node.lineno, ast.unparse(target)))
    return found


def test_the_patch_finder_sees_patches():
    source = (
        "import os.path\n"
        "from m import Assembler, helper as h\n"
        "class Own:\n    pass\n"
        "Own.x = 1\n"  # its own class: fine
        "Assembler.receive = lambda self: None\n"
        "h.attr += 1\n"
        "os.path.sep = '/'\n"
        "del Assembler.other\n"
        "setattr(Assembler, 'y', 2)\n"
        "def f(self):\n    self.x = 1\n"
    )
    assert [line for line, _ in patches(source)] == [6, 7, 8, 9, 10]


def test_no_module_assigns_to_an_attribute_of_what_it_imported():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue
        found += [f"{path.relative_to(ROOT)}:{line}: {code}" for line, code in patches(path.read_text())]
    assert not found, "modules that change what they imported (give it an API instead):\n" + "\n".join(found)
