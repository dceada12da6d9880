"""The console's page is whole in the package: every file index.html loads is there, and
pyproject.toml's package data takes each of them into an install (a wheel)."""

from __future__ import annotations

import fnmatch
import re
import tomllib
from pathlib import Path

from magnetar.admin.console_api import static_dir

ROOT = Path(__file__).resolve().parents[2]


def test_every_file_the_page_loads_is_installed():
    folder = static_dir()
    page = (folder / "index.html").read_text()
    loaded = re.findall(r'(?:src|href)="([^"#:]+)"', page)
    assert {"console.js", "chart.js", "console.css"} <= set(loaded)
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "magnetar"
    ]
    for name in ["index.html", *loaded]:
        assert (folder / name).is_file(), name
        assert any(fnmatch.fnmatch(f"admin/console/{name}", p) for p in patterns), (
            f"{name} is not package data"
        )


def test_the_page_runs_no_inline_script():
    # The page's Content-Security-Policy allows its own files only (console_api.HEADERS).
    page = (static_dir() / "index.html").read_text()
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", page) is None
    assert re.search(r"\son[a-z]+\s*=", page) is None
