"""py-spy profiles of a broker, and the hotspots in them.

``start_profiler`` attaches ``py-spy record --format raw`` to a PID; py-spy stops by itself when the process
exits. ``hotspots`` reads the collapsed stacks (``frame;frame;frame count`` per line) and answers, for each
function, the share of samples in which it was the innermost frame (self) and in which it was anywhere on
the stack (total).

    python -m bench.hotspots /tmp/prof/*.txt            # the top functions over all the files
    python -m bench.hotspots --top 30 /tmp/prof/magnetar-fsync-1MB-*.txt
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SAMPLE_RATE = 100
FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
SITE = ("site-packages/", "lib/python3")
#: Innermost frames of a thread that waits rather than works (the loop in epoll, the fsync thread idle).
IDLE = (
    "epoll_pwait",
    "epoll_wait",
    "Condition.wait",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
    "PyThread_acquire_lock_timed",
)
NO_SYMBOL = "<no symbol>"


def py_spy() -> str:
    beside = Path(sys.executable).parent / "py-spy"
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    return found


def start_profiler(pid: int, out: Path, native: bool = False) -> subprocess.Popen:
    """py-spy on ``pid`` into ``out``; ``native`` adds C frames (uvloop, crc32c, the kernel's syscalls)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [py_spy(), "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE), "--format", "raw"]
    cmd += ["--native"] if native else []
    with open(f"{out}.log", "wb") as log:
        return subprocess.Popen([*cmd, "--output", str(out)], stdout=subprocess.DEVNULL, stderr=log)


def stop_profiler(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """py-spy ends when its target does; if it has not within ``timeout``, SIGINT makes it write and exit."""
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout)


# -- reading profiles ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Hotspot:
    function: str
    self_pct: float
    total_pct: float


def read_stacks(
    paths: Iterable[Path], only: str | None = None, keep_idle: bool = False
) -> Counter[tuple[str, ...]]:
    """Collapsed stacks (outermost frame first) and their sample counts, summed over ``paths``.

    With ``only``, just the stacks with a frame containing that text (``Runner.run``: the event loop's
    thread; ``Syncer``: the fsync thread). Samples of a waiting thread (innermost frame in ``IDLE``) are
    dropped unless ``keep_idle``: what is left is where the broker spends CPU (and blocking syscalls).
    """
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in paths:
        for line in Path(path).read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if only and only not in stack:
                continue
            if stack and count.isdigit():
                frames = _caller_owns_unnamed(tuple(_short(frame) for frame in stack.split(";")))
                if frames and (keep_idle or not frames[-1].endswith(IDLE)):
                    stacks[frames] += int(count)
    return stacks


def _caller_owns_unnamed(frames: tuple[str, ...]) -> tuple[str, ...]:
    """Innermost frames without a symbol (in libc mostly memcpy, memmove, futex) count as their caller's."""
    end = len(frames)
    while end and frames[end - 1].endswith(NO_SYMBOL):
        end -= 1
    return frames[:end]


def _short(frame: str) -> str:
    """``func (path/to/magnetar/broker/topic.py:12)`` -> ``broker/topic.py:func``; other code by file name."""
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    func, file = match.group("func"), match.group("file")
    if func.startswith("0x"):  # no symbol: in libc these are mostly memcpy/memmove
        func = NO_SYMBOL
    if "magnetar/" in file:
        file = file.rsplit("magnetar/", 1)[1]
    elif any(marker in file for marker in SITE):
        file = Path(file).name
    return f"{file}:{func}"


def hotspots(stacks: Counter[tuple[str, ...]], top: int = 20) -> tuple[int, list[Hotspot], list[Hotspot]]:
    """Total samples, the top functions by self share, and the top by total share."""
    total = sum(stacks.values())
    own: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    for stack, count in stacks.items():
        own[stack[-1]] += count
        for function in set(stack):
            anywhere[function] += count
    if not total:
        return 0, [], []

    def spot(function: str) -> Hotspot:
        return Hotspot(function, 100 * own[function] / total, 100 * anywhere[function] / total)

    by_self = [spot(f) for f, _ in own.most_common(top)]
    by_total = [spot(f) for f, _ in anywhere.most_common(top)]
    return total, by_self, by_total


def markdown(total: int, by_self: list[Hotspot], by_total: list[Hotspot]) -> str:
    lines = [f"{total} samples.", "", "| self % | total % | function (innermost frame) |", "|---:|---:|---|"]
    lines += [f"| {h.self_pct:.1f} | {h.total_pct:.1f} | `{h.function}` |" for h in by_self]
    lines += ["", "| total % | self % | function (anywhere on the stack) |", "|---:|---:|---|"]
    lines += [f"| {h.total_pct:.1f} | {h.self_pct:.1f} | `{h.function}` |" for h in by_total]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench.hotspots", description="hotspots in py-spy raw profiles"
    )
    p.add_argument("profiles", nargs="+", type=Path)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--only", help="keep the stacks with a frame containing this text, e.g. Runner.run")
    p.add_argument("--keep-idle", action="store_true", help="keep samples of threads that wait")
    args = p.parse_args(argv)
    print(markdown(*hotspots(read_stacks(args.profiles, args.only, args.keep_idle), args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
