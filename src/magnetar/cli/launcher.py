"""The broker launcher's own process (``magnetar.broker_launcher`` starts it and asks it for brokers).

It imports what ``magnetar standalone`` imports by the time it listens, then forks a child per
request line on stdin: the child sets up the stdio, environment, working directory and arguments
asked for and runs ``magnetar``'s main, as ``python -m magnetar`` would; the launcher reaps it and
writes its exit status (``subprocess.Popen.returncode``'s form) to a file named by the request.
It is single-threaded and runs no event loop, so forking it is safe, and it ends when its stdin
closes.
"""

from __future__ import annotations

import atexit
import importlib
import io
import json
import os
import selectors
import signal
import sys
import traceback
from pathlib import Path

from magnetar.cli.main import main

#: What the launcher imports before it forks: what ``magnetar standalone`` imports by the time it listens.
PRELOAD = (
    "magnetar.cli.main",
    "magnetar.cli.standalone",
    "magnetar.cli.worker",
    "magnetar.cli.supervisor",
    "magnetar.broker.ownership_sqlite",
    "uvloop",
    "faulthandler",
)


def serve(status_dir: Path) -> None:
    """Import the broker, then fork a broker per request line on stdin until stdin closes."""
    for name in PRELOAD:
        importlib.import_module(name)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    requests = sys.stdin.buffer
    answers = sys.stdout.buffer
    ids: dict[int, int] = {}  # the PID of each child not reaped yet -> its request id
    selector = selectors.DefaultSelector()
    selector.register(requests.fileno(), selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    answers.write(b'{"ready": true}\n')
    answers.flush()
    pending = b""
    while True:
        for key, _ in selector.select(timeout=0.5):
            if key.fd == wake_r:
                os.read(wake_r, 4096)
                continue
            chunk = os.read(requests.fileno(), 65536)
            if not chunk:  # the process that started us is gone
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                try:
                    pid = os.fork()
                except OSError as exc:
                    answers.write(json.dumps({"error": str(exc)}).encode() + b"\n")
                    answers.flush()
                    continue
                if pid == 0:
                    _run_child(request, (wake_r, wake_w))
                ids[pid] = request["id"]
                answers.write(json.dumps({"pid": pid}).encode() + b"\n")
                answers.flush()
        _reap(ids, status_dir)


def _reap(ids: dict[int, int], status_dir: Path) -> None:
    while ids:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        request_id = ids.pop(pid, None)
        if request_id is not None:
            written = status_dir / f"{request_id}.tmp"
            written.write_text(str(os.waitstatus_to_exitcode(status)))
            written.rename(status_dir / str(request_id))


def _run_child(request: dict, launcher_fds: tuple[int, int]) -> None:
    """In the forked child: become the broker the request asks for; never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in launcher_fds:
            os.close(fd)
        devnull = os.open(os.devnull, os.O_RDONLY)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        # The launcher's sys.stdout and sys.stderr now write to the log (fds 1 and 2); through at
        # once, as PYTHONUNBUFFERED has them in a fresh broker. sys.stdin reads /dev/null (fd 0).
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True, write_through=True)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # as an uncaught exception ends a process: its traceback, exit status 1
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()  # what a normal exit runs (logging's last flush among them)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
