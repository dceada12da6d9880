"""Broker subprocesses: start, find the port, sample CPU and memory from ``/proc``, stop by PID.

Nothing here knows which broker it runs; ``brokers.py`` says how to start each and how to find its port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
TCP_LISTEN = "0A"


class BrokerStartError(RuntimeError):
    """The broker exited, or never listened, before the timeout."""


# -- /proc readers ------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of every thread of ``pid`` so far (``/proc/<pid>/stat`` fields 14, 15)."""
    user, system = cpu_split(pid)
    return user + system


def cpu_split(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of every thread of ``pid`` so far: system time is the kernel's
    share (socket writes and reads, and on loopback much of the receiving side's TCP work too)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


def tree_cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` and of every process under it, live or reaped: each
    live one's own threads (fields 14, 15) and the children it already waited for (fields 16, 17:
    a worker that a supervisor restarted still counts). Children are found through every thread's
    ``children`` file, since any thread may have started one."""
    total = 0.0
    for each in [pid, *descendants(pid)]:
        try:
            text = Path(f"/proc/{each}/stat").read_text()
        except OSError:  # it exited meanwhile: its parent's fields 16 and 17 have it once reaped
            continue
        fields = text[text.rindex(")") + 2 :].split()
        total += sum(int(f) for f in fields[11:15]) / CLOCK_TICKS
    return total


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid``, children first."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                children = [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
            found += children
            todo += children
    return found


def memory_kib(pid: int) -> dict[str, int]:
    """``VmRSS`` and ``VmHWM`` (peak RSS) of ``pid`` in KiB, from ``/proc/<pid>/status``."""
    found: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def tree_cpu_split(pid: int) -> tuple[float, float]:
    """``tree_cpu_seconds`` as user and system seconds (the kernel's share: socket writes and reads)."""
    user = system = 0.0
    for each in [pid, *descendants(pid)]:
        try:
            text = Path(f"/proc/{each}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        user += (int(fields[11]) + int(fields[13])) / CLOCK_TICKS
        system += (int(fields[12]) + int(fields[14])) / CLOCK_TICKS
    return user, system


def tree_memory_kib(pid: int) -> dict[str, int]:
    """``memory_kib`` of ``pid`` and every live process under it, summed."""
    total: dict[str, int] = {"VmRSS": 0, "VmHWM": 0}
    for one in (pid, *descendants(pid)):
        try:
            for key, value in memory_kib(one).items():
                total[key] += value
        except OSError:
            continue
    return total


def listening_ports(pid: int) -> list[tuple[str, int]]:
    """``(ip, port)`` of every IPv4 TCP socket in LISTEN state that ``pid`` holds open."""
    inodes = set()
    fd_dir = Path(f"/proc/{pid}/fd")
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = []
    for line in Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
        parts = line.split()
        local, state, inode = parts[1], parts[3], parts[9]
        if state == TCP_LISTEN and inode in inodes:
            hex_ip, hex_port = local.split(":")
            ip = ".".join(str(int(hex_ip[i : i + 2], 16)) for i in (6, 4, 2, 0))
            ports.append((ip, int(hex_port, 16)))
    return ports


# -- sampling -----------------------------------------------------------------------------------------------


@dataclass
class Usage:
    """What a broker used over one measured window."""

    cpu_s: float
    peak_rss_kib: int  # the largest VmRSS sampled in the window
    hwm_kib: int  # the kernel's VmHWM at the end of the window (peak over the process's life)
    system_s: float = 0.0  # of ``cpu_s``, the kernel's share


class UsageSampler:
    """CPU seconds over a window, and RSS sampled on a thread every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.05, tree: bool = False) -> None:
        """``tree``: ``pid`` and its children together (a supervisor and its workers)."""
        self.pid = pid
        self.interval = interval
        self._cpu = tree_cpu_split if tree else cpu_split
        self._memory = tree_memory_kib if tree else memory_kib
        self._peak = 0
        self._cpu0 = (0.0, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name=f"rss-{pid}", daemon=True)

    def __enter__(self) -> UsageSampler:
        self._cpu0 = self._cpu(self.pid)
        self._peak = self._memory(self.pid).get("VmRSS", 0)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._peak = max(self._peak, self._memory(self.pid).get("VmRSS", 0))
            except OSError:  # the process is gone; the window's result says so
                return

    def usage(self) -> Usage:
        memory = self._memory(self.pid)
        peak = max(self._peak, memory.get("VmRSS", 0))
        user, system = self._cpu(self.pid)
        user -= self._cpu0[0]
        system -= self._cpu0[1]
        return Usage(cpu_s=user + system, peak_rss_kib=peak, hwm_kib=memory["VmHWM"], system_s=system)


# -- the process ---------------------------------------------------------------------------------------------


PortFinder = Callable[["BrokerProcess"], "int | None"]


class BrokerProcess:
    """One broker subprocess: ``start()`` waits until ``find_port`` sees its port; ``stop()`` ends it."""

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        log_path: Path,
        find_port: PortFinder,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.cmd = list(cmd)
        self.log_path = log_path
        self.find_port = find_port
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def start(self, timeout: float = START_TIMEOUT_S) -> BrokerProcess:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self.env,
                cwd=self.cwd,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerStartError(
                    f"{self.name} exited with {self.proc.returncode} before listening:\n{self.log_tail()}"
                )
            port = self.find_port(self)
            if port:
                self.port = port
                return self
            time.sleep(0.02)
        self.stop()
        raise BrokerStartError(f"{self.name} did not listen within {timeout}s:\n{self.log_tail()}")

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout``; the exit code (None if it was never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> BrokerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
