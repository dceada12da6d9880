"""The docs test's own parts: directives are read strictly, and a page that does not do what it says
fails (so test_docs.py cannot pass by running nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import Block, DirectiveError, StopBackground, parse, pip_install_lines
from tests.docs.run_doc import imported_modules, installed_by, pip_specs
from tests.docs.test_docs import RUNNER, netns_problem

FENCE = "```"


def test_directives_attach_to_the_next_fence_in_lists_too():
    steps = parse(
        f'<!-- doctest: skip reason="needs Docker" -->\n\n{FENCE}sh\ndocker ps\n{FENCE}\n\n'
        f'- an item:\n\n  <!-- doctest: file path="a.toml" -->\n  {FENCE}toml\n  x = 1\n  {FENCE}\n\n'
        "<!-- doctest: stop-background -->\n"
    )
    assert [type(s) for s in steps] == [Block, Block, StopBackground]
    first, second = steps[0], steps[1]
    assert isinstance(first, Block) and isinstance(second, Block)
    assert first.directive("skip") is not None and first.directive("skip").options["reason"] == "needs Docker"
    assert second.directive("file") is not None and second.text == "x = 1\n"


@pytest.mark.parametrize(
    ("page", "complaint"),
    [
        (f"<!-- doctest: skip -->\n{FENCE}sh\nls\n{FENCE}\n", "missing ['reason']"),
        (f'<!-- doctest: skip reason="" -->\n{FENCE}sh\nls\n{FENCE}\n', "needs a reason"),
        (f"<!-- doctest: sometimes -->\n{FENCE}sh\nls\n{FENCE}\n", "unknown doctest directive"),
        (f'<!-- doctest: skip reason="x" -->\nSome text.\n\n{FENCE}sh\nls\n{FENCE}\n', "not followed"),
        (f'{FENCE}\n<!-- doctest: skip reason="x" -->\n{FENCE}\n', "not read as HTML blocks"),
        ("<!-- doctest: output -->\n```python\nprint(1)\n```\n", "output is for a block of text"),
    ],
)
def test_a_directive_the_runner_cannot_follow_is_an_error(page, complaint):
    with pytest.raises(DirectiveError, match=complaint.replace("[", r"\[").replace("]", r"\]")):
        parse(page)


def test_pip_lines_name_the_project_and_what_it_brings():
    steps = parse(
        f"{FENCE}sh\n. .venv/bin/activate\npip install -e '.[spark]' pulsar-client  # both\n{FENCE}\n"
    )
    assert pip_install_lines(steps) == [["install", "-e", ".[spark]", "pulsar-client"]]
    installed = installed_by(pip_specs(["install", "-e", "."]))
    assert {"magnetar", "protobuf", "click"} <= installed and "pulsar-client" not in installed
    assert imported_modules("import pulsar\nfrom magnetar.client import aio\nimport os\n") == {
        "pulsar",
        "magnetar",
    }


def run_page(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    problem = netns_problem()
    if problem is not None:
        pytest.skip(f"the docs test runs each page in a network namespace of its own: {problem}")
    page = tmp_path / "page.md"
    page.write_text(text)
    return subprocess.run(
        [sys.executable, str(RUNNER), str(page), "--workdir", str(tmp_path / "work"), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_page_that_does_what_it_says_passes(tmp_path):
    result = run_page(
        tmp_path,
        f'<!-- doctest: background until="listening on" -->\n{FENCE}sh\nmagnetar standalone --data-dir d\n'
        f"{FENCE}\n\n{FENCE}console\n$ magnetar admin topics stats nope; echo $?\n"
        f"Error: Topic ... does not exist (HTTP 404)\n3\n{FENCE}\n\n"
        f"{FENCE}python\nprint(6 * 7)\n{FENCE}\n\n<!-- doctest: output -->\n{FENCE}\n42\n{FENCE}\n",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 blocks run, 0 skipped (each says why), 0 failed" in result.stdout


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        (
            f"{FENCE}python\nprint(6 * 7)\n{FENCE}\n\n<!-- doctest: output -->\n{FENCE}\n41\n{FENCE}\n",
            "output differs",
        ),
        (f"{FENCE}sh\ntrue\nfalse\ntrue\n{FENCE}\n", "exit code 1"),
        (f"{FENCE}python\nimport hypothesis\n{FENCE}\n", "imports what no 'pip install'"),
        (f"{FENCE}python\nasync with x:\n    pass\n{FENCE}\n", "not valid Python"),
        (f"{FENCE}console\n$ echo hello\ngoodbye\n{FENCE}\n", "output differs"),
        (
            f'<!-- doctest: background until="never printed" -->\n{FENCE}sh\necho started\n{FENCE}\n',
            "exited with 0",
        ),
    ],
)
def test_a_page_that_does_not_do_what_it_says_fails(tmp_path, body, failure):
    result = run_page(tmp_path, body)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "FAIL page.md:" in result.stdout and failure in result.stdout, result.stdout
