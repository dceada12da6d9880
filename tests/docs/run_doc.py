"""Run the code blocks of one Markdown page in order, as a reader following it would.

    python tests/docs/run_doc.py docs/client.md [--workdir DIR] [--timeout S]

The page runs in a network namespace of its own (``unshare --net``; the script re-executes itself there),
so the pages' own addresses, ``127.0.0.1:6650`` and ``localhost:8080``, are this page's alone: nothing
is rewritten, and two pages (two pytest-xdist workers, a developer's broker on 6650) never meet.

What a reader has, the page has: a working directory of its own (empty but for ``.venv/bin``), ``HOME``
inside it, and ``magnetar``, ``python`` and ``pytest`` in ``.venv/bin``, on ``PATH`` from the start unless
the page activates it itself (the README). Shell blocks run in bash, in order, each seeing the directory
and variables the one before left; a ``pip install`` there installs nothing: it records what it names,
which must be installed here, and each Python block's imports must come from what the pages named (the
README's install for every page, then the page's own). Python blocks run in one namespace, as one script
would. See ``blocks.py`` for the directives. Prints a line per block and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import doctest
import fcntl
import functools
import io
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TextIO

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script: tests.docs.blocks is beside it
    sys.path.insert(0, str(ROOT))

from tests.docs.blocks import (  # noqa: E402
    CONSOLE,
    PYTHON,
    SHELL,
    Block,
    Step,
    StopBackground,
    parse_file,
    pip_install_lines,
)

README = ROOT / "README.md"
PROJECT = "magnetar"
#: The import names of this project's own packages.
OWN_MODULES = frozenset({"magnetar", "pyspark_magnetar"})
IN_NETNS = "DOCTEST_IN_NETNS"  # not MAGNETAR_*: the broker reads those as settings
BACKGROUND_START_S = 60.0
BACKGROUND_STOP_S = 30.0
CHECKER = doctest.OutputChecker()
CHECK_FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


class BlockFailed(Exception):
    """A block did not do what the page says."""


# -- the network namespace ----------------------------------------------------------------------------------


def netns_command() -> list[str]:
    """``unshare`` for a network namespace of our own (a user namespace too when not root)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise RuntimeError("unshare (util-linux) is not on PATH")
    return [unshare, "--net"] if os.geteuid() == 0 else [unshare, "--net", "--map-root-user"]


def loopback_up() -> None:
    """Bring ``lo`` up: a new network namespace has it down (SIOCGIFFLAGS, then SIOCSIFFLAGS | IFF_UP)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)
        flags = struct.unpack("16sh22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sh22x", b"lo", flags | iff_up))


# -- what the pages install ---------------------------------------------------------------------------------


def project_requirements(extras: Iterable[str]) -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = set(extras) - optional.keys()
    if unknown:
        raise BlockFailed(f"pyproject.toml has no extra {sorted(unknown)} (it has {sorted(optional)})")
    return [*project["dependencies"], *(r for e in extras for r in optional[e])]


def requirements_of(name: str, extras: frozenset[str]) -> list[Requirement]:
    if canonicalize_name(name) == PROJECT:
        texts = project_requirements(extras)
    else:
        texts = metadata.requires(name) or []
    wanted = []
    for text in texts:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in (extras or {""})):
            wanted.append(req)
    return wanted


def installed_by(specs: Iterable[tuple[str, frozenset[str]]]) -> set[str]:
    """The distributions that installing ``specs`` brings, dependencies and all (canonical names).

    Each named one must be installed here (else BlockFailed: the test cannot vouch for it)."""
    seen: dict[str, set[str]] = {}
    todo = [(name, extras, True) for name, extras in specs]
    while todo:
        name, extras, named = todo.pop()
        key = canonicalize_name(name)
        if key in seen and extras <= seen[key]:
            continue
        try:
            requirements = requirements_of(name, extras)
        except metadata.PackageNotFoundError:
            if named:
                raise BlockFailed(f"pip install {name}: not installed where the docs test runs") from None
            continue  # a dependency this platform does not need
        seen.setdefault(key, set()).update(extras)
        todo += [(r.name, frozenset(r.extras), False) for r in requirements]
    return set(seen)


def pip_specs(argv: list[str]) -> list[tuple[str, frozenset[str]]]:
    """What ``pip install ARGS`` names: ``.`` (this clone) is the project."""
    if not argv or argv[0] != "install":
        raise BlockFailed(f"pip {' '.join(argv)}: the docs test follows only 'pip install'")
    specs = []
    for arg in argv[1:]:
        if arg in {"-e", "--editable", "-q", "--quiet", "-U", "--upgrade"}:
            continue
        if arg.startswith("-"):
            raise BlockFailed(f"pip install: the docs test does not follow {arg}")
        if arg == "." or arg.startswith(".["):
            arg = PROJECT + arg[1:]
        try:
            req = Requirement(arg)
        except InvalidRequirement as error:
            raise BlockFailed(f"pip install {arg}: {error}") from None
        specs.append((req.name, frozenset(req.extras)))
    return specs


def imported_modules(source: str) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.partition(".")[0])
    return modules - set(sys.stdlib_module_names) - {"__future__"}


@functools.cache
def distributions_by_module() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


def providers(module: str) -> set[str]:
    """The distributions that install ``module`` here (canonical names)."""
    if module in OWN_MODULES:
        return {PROJECT}
    return {canonicalize_name(d) for d in distributions_by_module().get(module, [])}


# -- running a page -----------------------------------------------------------------------------------------


@dataclass
class Background:
    line: int
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class Page:
    path: Path
    workdir: Path
    out: TextIO
    env: dict[str, str] = field(default_factory=dict)
    namespace: dict[str, object] = field(default_factory=lambda: {"__name__": "__main__"})
    installed: set[str] = field(default_factory=set)
    background: list[Background] = field(default_factory=list)
    foreground: subprocess.Popen[bytes] | None = None
    last_output: str | None = None
    failures: list[str] = field(default_factory=list)
    current: str = "setup"
    block_timeout: float = 300.0

    # -- set-up ----------------------------------------------------------------------------------------------

    def prepare(self, steps: list[Step]) -> None:
        bin_dir = self.workdir / ".venv" / "bin"
        bin_dir.mkdir(parents=True)
        home = self.workdir / "home"
        home.mkdir()
        python = shlex.quote(sys.executable)
        runner = shlex.quote(str(Path(__file__).resolve()))
        wrappers = {
            "magnetar": f"{python} -m magnetar",
            "python": python,
            "python3": python,
            "pytest": f"{python} -m pytest",
            "pip": f"{python} {runner} --record-pip",
            "pip3": f"{python} {runner} --record-pip",
        }
        for name, command in wrappers.items():
            (bin_dir / name).write_text(f'#!/bin/sh\nexec {command} "$@"\n')
            (bin_dir / name).chmod(0o755)
        (bin_dir / "activate").write_text(
            f"VIRTUAL_ENV={shlex.quote(str(bin_dir.parent))}\nexport VIRTUAL_ENV\n"
            'PATH="$VIRTUAL_ENV/bin:$PATH"\nexport PATH\nhash -r 2>/dev/null || true\n'
        )
        # The reader's PATH has no magnetar on it until .venv/bin is: drop the directories that hold one.
        path = [
            d for d in os.environ.get("PATH", "").split(os.pathsep) if d and not Path(d, "magnetar").exists()
        ]
        activates = any(
            isinstance(s, Block) and s.runnable and not s.directive("skip") and ".venv/bin/activate" in s.text
            for s in steps
        )
        if not activates:
            path.insert(0, str(bin_dir))
        self.env = {
            **os.environ,
            "PATH": os.pathsep.join(path),
            "HOME": str(home),
            "PWD": str(self.workdir),
            "PYTHONUNBUFFERED": "1",
            "DOCTEST_PIP_LEDGER": str(self.workdir / ".doctest-pip.jsonl"),
            "DOCTEST_PYTHON": sys.executable,
            "DOCTEST_RUNNER": str(Path(__file__).resolve()),
        }
        self.env.pop("VIRTUAL_ENV", None)
        self.env.pop(IN_NETNS, None)
        self.env.pop("CI", None)  # a reader's shell: the suite's CI rules are not the page's
        if self.path.resolve() != README.resolve():
            self.installed = installed_by(
                s for argv in pip_install_lines(parse_file(README)) for s in pip_specs(argv)
            )

    # -- shell -----------------------------------------------------------------------------------------------

    def script(self, text: str, *, strict: bool) -> tuple[str, Path]:
        env_out = Path(tempfile.mkstemp(dir=self.workdir, prefix=".doctest-env-")[1])
        prelude = [
            "set -eo pipefail" if strict else "set +e",
            'pip() { "$DOCTEST_PYTHON" "$DOCTEST_RUNNER" --record-pip "$@"; }',
            'pip3() { pip "$@"; }',
            f"trap 'env -0 > {shlex.quote(str(env_out))}' EXIT",
        ]
        return "; ".join(prelude) + "\n" + text, env_out

    def run_shell(self, text: str, *, strict: bool) -> tuple[int, str]:
        timeout = self.block_timeout
        script, env_out = self.script(text, strict=strict)
        proc = subprocess.Popen(
            ["bash", "-c", script],
            cwd=self.env["PWD"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.foreground = proc
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise BlockFailed(f"still running after {timeout:g} s") from None
        finally:
            self.foreground = None
            self.pick_up_env(env_out)
        self.pick_up_pip()
        return proc.returncode, output.decode(errors="replace")

    def pick_up_env(self, env_out: Path) -> None:
        raw = env_out.read_bytes() if env_out.exists() else b""
        env_out.unlink(missing_ok=True)
        if raw:
            pairs = (item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
            self.env = {k: v for k, v in pairs if k not in {"SHLVL", "_", "OLDPWD"}}

    def pick_up_pip(self) -> None:
        ledger = Path(self.env["DOCTEST_PIP_LEDGER"])
        if ledger.exists():
            calls = [json.loads(line) for line in ledger.read_text().splitlines() if line]
            ledger.unlink()
            for argv in calls:
                self.installed |= installed_by(pip_specs(argv))

    def shell_block(self, block: Block) -> None:
        code, output = self.run_shell(block.text, strict=True)
        self.last_output = output
        self.out.write(indent(output))
        if code != 0:
            raise BlockFailed(f"exit code {code}")

    def console_block(self, block: Block) -> None:
        for command, want in console_commands(block.text):
            _, got = self.run_shell(command, strict=False)
            self.out.write(indent(f"$ {command}\n{got}"))
            if not CHECKER.check_output(want, got, CHECK_FLAGS):
                raise BlockFailed(f"$ {command}\n" + difference(want, got))
            self.last_output = got

    def background_block(self, block: Block, until: str) -> None:
        script, _ = self.script(block.text, strict=True)
        log = Path(tempfile.mkstemp(dir=self.workdir, prefix=f".doctest-background-{block.line}-")[1])
        with open(log, "wb") as sink:
            proc = subprocess.Popen(
                ["bash", "-c", script],
                cwd=self.env["PWD"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.background.append(Background(block.line, proc, log))
        pattern = re.compile(until)
        deadline = time.monotonic() + BACKGROUND_START_S
        while not pattern.search(log.read_text(errors="replace")):
            if proc.poll() is not None:
                self.background.remove(self.background[-1])
                raise BlockFailed(
                    f"exited with {proc.returncode} before printing {until!r}:\n{log.read_text()}"
                )
            if time.monotonic() > deadline:
                raise BlockFailed(f"no {until!r} within {BACKGROUND_START_S:g} s:\n{log.read_text()}")
            time.sleep(0.05)
        self.out.write(indent(log.read_text(errors="replace")))

    def stop_background(self) -> list[str]:
        """Ctrl-C to each background command, newest first; each must exit 0 (what the docs promise)."""
        problems = []
        while self.background:
            job = self.background.pop()
            if job.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(job.proc.pid, signal.SIGINT)
            try:
                code = job.proc.wait(BACKGROUND_STOP_S)
            except subprocess.TimeoutExpired:
                kill_group(job.proc)
                problems.append(f"line {job.line}: still running {BACKGROUND_STOP_S:g} s after Ctrl-C")
                continue
            if code != 0:
                tail = job.log.read_text(errors="replace")[-2000:]
                problems.append(f"line {job.line}: exited with {code} after Ctrl-C:\n{tail}")
        return problems

    # -- python ----------------------------------------------------------------------------------------------

    def python_block(self, block: Block) -> None:
        missing = {
            m: providers(m) for m in sorted(imported_modules(block.text)) if not providers(m) & self.installed
        }
        if missing:
            pages = "the README" if self.path.resolve() == README.resolve() else "the README or this page"
            raise BlockFailed(
                f"imports what no 'pip install' line of {pages} brings: "
                + ", ".join(
                    f"{m} (from {', '.join(sorted(d)) or 'nothing installed here'})"
                    for m, d in missing.items()
                )
            )
        try:
            code = compile("\n" * block.line + block.text, str(self.path), "exec")
        except SyntaxError as error:
            raise BlockFailed(f"not valid Python: {error}") from None
        os.chdir(self.env["PWD"])
        os.environ.clear()
        os.environ.update(self.env)
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(Tee(captured, self.out)):
                exec(code, self.namespace)
        except BaseException as error:  # the page's code: report whatever it raised
            if isinstance(error, KeyboardInterrupt):
                raise
            trace = "".join(traceback.format_exception(error)[-6:])
            raise BlockFailed(f"{type(error).__name__}: {error}\n{trace}") from None
        finally:
            self.last_output = captured.getvalue()

    # -- the page --------------------------------------------------------------------------------------------

    def run_block(self, block: Block) -> None:
        if (skip := block.directive("skip")) is not None:
            if block.runnable:
                self.out.write(f"SKIP {self.where(block)} {block.lang}: {skip.options['reason']}\n")
            return
        if (file := block.directive("file")) is not None:
            target = Path(self.env["PWD"], file.options["path"])
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text)
            self.out.write(f"FILE {self.where(block)} {file.options['path']}\n")
            return
        if block.directive("output") is not None:
            self.current = f"{self.where(block)} output"
            if self.last_output is None:
                raise BlockFailed("an output block with no run block before it")
            if not CHECKER.check_output(block.text, self.last_output, CHECK_FLAGS):
                raise BlockFailed(difference(block.text, self.last_output))
            self.out.write(f"PASS {self.current}\n")
            return
        if not block.runnable:
            return
        self.current = f"{self.where(block)} {block.lang}"
        self.out.write(f"RUN  {self.current}\n")
        self.out.flush()
        if (background := block.directive("background")) is not None:
            self.background_block(block, background.options["until"])
        elif block.lang in SHELL:
            self.shell_block(block)
        elif block.lang in CONSOLE:
            self.console_block(block)
        elif block.lang in PYTHON:
            self.python_block(block)
        self.out.write(f"PASS {self.current}\n")

    def where(self, block: Block) -> str:
        return f"{self.path.name}:{block.line}"

    def run(self, steps: list[Step]) -> int:
        self.prepare(steps)
        for step in steps:
            if isinstance(step, StopBackground):
                self.current = f"{self.path.name}:{step.line} stop-background"
                for problem in self.stop_background():
                    self.fail(problem)
                continue
            try:
                self.run_block(step)
            except BlockFailed as error:
                self.fail(str(error))
            self.out.flush()
        for problem in self.stop_background():
            self.fail(f"at the end of the page: {problem}")
        runnable = [s for s in steps if isinstance(s, Block) and s.runnable]
        skipped = [s for s in runnable if s.directive("skip")]
        self.out.write(
            f"{self.path.name}: {len(runnable) - len(skipped)} blocks run, "
            f"{len(skipped)} skipped (each says why), {len(self.failures)} failed\n"
        )
        for failure in self.failures:
            self.out.write(f"  FAILED {failure.splitlines()[0]}\n")
        return 1 if self.failures else 0

    def fail(self, message: str) -> None:
        self.failures.append(f"{self.current}: {message}")
        self.out.write(f"FAIL {self.current}: {message}\n")


class Tee(io.TextIOBase):
    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def console_commands(text: str) -> Iterator[tuple[str, str]]:
    """A console block's ``$ command`` lines (``\\``-continued) and the output shown after each."""
    command: list[str] | None = None
    want: list[str] = []
    continued = False
    for line in text.splitlines():
        if continued and command is not None:
            command.append(line)
            continued = line.endswith("\\")
        elif line.startswith("$ "):
            if command is not None:
                yield "\n".join(command), "".join(w + "\n" for w in want)
            command, want = [line[2:]], []
            continued = line.endswith("\\")
        elif command is None:
            raise BlockFailed(f"a console block must start with '$ ', not {line!r}")
        else:
            want.append(line)
    if command is not None:
        yield "\n".join(command), "".join(w + "\n" for w in want)


def difference(want: str, got: str) -> str:
    return "output differs (... matches anything):\n--- the page shows\n" + want + "--- it printed\n" + got


def indent(text: str) -> str:
    return "".join(f"     | {line}\n" for line in text.splitlines())


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def watchdog(page: Page, timeout: float) -> None:
    """Ends the run after ``timeout`` seconds, naming the block it was in (a Python block may block in
    C++ code, where no signal reaches it), and takes the background commands down with it."""

    def expire() -> None:
        page.out.write(f"FAIL {page.current}: the page ran past {timeout:g} s\n")
        page.out.flush()
        running = [job.proc for job in page.background] + ([page.foreground] if page.foreground else [])
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        os._exit(3)

    timer = threading.Timer(timeout, expire)
    timer.daemon = True
    timer.start()


def record_pip(argv: list[str]) -> int:
    ledger = os.environ.get("DOCTEST_PIP_LEDGER")
    if not ledger:
        print("pip: the docs test's stand-in runs only inside a page's run", file=sys.stderr)
        return 2
    with open(ledger, "a") as out:
        out.write(json.dumps(argv) + "\n")
    print(f"(docs test: 'pip {' '.join(argv)}' is checked against what is installed; nothing is installed)")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--record-pip"]:
        return record_pip(args[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("page", type=Path)
    parser.add_argument(
        "--workdir", type=Path, help="an empty directory for the page (default: a new temp dir)"
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole page")
    parser.add_argument("--block-timeout", type=float, default=300.0, help="seconds for one shell command")
    options = parser.parse_args(args)
    if os.environ.get(IN_NETNS) != "1":
        env = {**os.environ, IN_NETNS: "1"}
        return subprocess.run([*netns_command(), sys.executable, __file__, *args], env=env).returncode
    loopback_up()
    steps = parse_file(options.page)
    workdir = options.workdir or Path(tempfile.mkdtemp(prefix="doctest-"))
    workdir.mkdir(parents=True, exist_ok=True)
    page = Page(options.page.resolve(), workdir.resolve(), sys.stdout, block_timeout=options.block_timeout)
    watchdog(page, options.timeout)
    try:
        code = page.run(steps)
    finally:
        for job in page.background:
            kill_group(job.proc)
    sys.stdout.flush()
    os._exit(code)  # threads a page's code left running (an unclosed client) must not hold the exit


if __name__ == "__main__":
    sys.exit(main())
