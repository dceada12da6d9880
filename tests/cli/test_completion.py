"""Shell completion: ``magnetar completion SHELL`` prints a script, and click answers completion
requests for subcommands and flags (the protocol the scripts speak)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import magnetar


@pytest.mark.parametrize(
    ("shell", "marker"),
    [
        ("bash", "complete -o nosort -F _magnetar_completion magnetar"),
        ("zsh", "#compdef magnetar"),
        ("fish", "complete --no-files --command magnetar"),
    ],
)
def test_the_completion_command_prints_each_shells_script(shell, marker):
    done = magnetar("completion", shell)
    assert done.returncode == 0, done.stderr
    assert marker in done.stdout
    assert "_MAGNETAR_COMPLETE" in done.stdout


def test_an_unknown_shell_is_a_usage_error():
    done = magnetar("completion", "tcsh")
    assert done.returncode == 2
    assert "tcsh" in done.stderr and "bash" in done.stderr


def complete(words: str, cword: int) -> list[str]:
    """What ``magnetar`` answers to a bash completion request: the values it offers."""
    env = {**os.environ, "_MAGNETAR_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    done = subprocess.run(
        [sys.executable, "-m", "magnetar"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [line.split(",", 1)[1] for line in done.stdout.splitlines()]


def test_completion_requests_answer_subcommands_and_flags():
    assert complete("magnetar pro", 1) == ["produce"]
    assert complete("magnetar tok", 1) == ["tokens"]
    assert complete("magnetar tokens cre", 2) == ["create", "create-key-pair", "create-secret-key"]
    assert complete("magnetar tokens create -", 3)[:2] == ["-sk", "--secret-key"]
    assert complete("magnetar produce --qu", 2) == ["--quiet"]
    assert complete("magnetar consume my-topic --sub", 3) == [
        "--subscription-name",
        "--subscription-type",
        "--subscription-position",
    ]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completes_with_the_printed_script(tmp_path: Path):
    # A `magnetar` on the PATH, as installing the package makes one; the script calls it back.
    program = tmp_path / "magnetar"
    program.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m magnetar "$@"\n')
    program.chmod(0o755)
    script = (
        'eval "$(magnetar completion bash)"; COMP_WORDS=(magnetar co); COMP_CWORD=1; '
        '_magnetar_completion magnetar; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["completion", "config", "consume"]
